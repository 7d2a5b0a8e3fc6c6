package rnet

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// waitUntil polls cond, yielding between looks, and fails the test if it is
// still false after a minute: a hang in the code under test becomes a
// failure that says what it waited for, not a stuck run.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after a minute for %s", what)
		}
		runtime.Gosched()
	}
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
