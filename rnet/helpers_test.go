package rnet

import (
	"os/exec"
	"strings"

	"github.com/rnet-dev/rnet/internal/ring"
)

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

func splitFields(s string) []string { return strings.Fields(s) }

func defaultSettingsLayout() ring.Layout {
	var c *Config
	return c.settings().ring.Layout()
}
