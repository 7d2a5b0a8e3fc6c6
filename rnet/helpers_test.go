package rnet

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/waittest"
)

// waitUntil and waitSignalled: see package waittest.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waittest.Until(t, what, cond)
}

func waitSignalled(t testing.TB, what string, signal <-chan struct{}, cond func() bool) {
	t.Helper()
	waittest.Signalled(t, what, signal, cond)
}

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

func splitFields(s string) []string { return strings.Fields(s) }

func defaultSettingsLayout() ring.Layout {
	var c *Config
	return c.settings().ring.Layout()
}
