//go:build linux && cgo

package interop

import (
	"sync/atomic"
	"testing"

	"github.com/rnet-dev/rnet/rnet"
)

// resumeOffered is set while TestInteropWithResume runs the suite again:
// every rnet end then sets Config.Resume, which no C peer agrees to (the
// extension's flag is a bit rsocket ignores, docs/design.md).
var resumeOffered atomic.Bool

// withResume is cfg with Config.Resume set while resumeOffered is, a copy.
func withResume(cfg *rnet.Config) *rnet.Config {
	if !resumeOffered.Load() {
		return cfg
	}
	c := rnet.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Resume = true
	return &c
}

// checkNoResume fails t if c, connected to a C peer, agreed to resume.
func checkNoResume(t *testing.T, c *rnet.Conn) {
	t.Helper()
	if c.Config().Resume {
		t.Errorf("a connection to a C rsocket peer agreed to resume: %v to %v", c.LocalAddr(), c.RemoteAddr())
	}
}

// TestInteropWithResume runs the C rsocket interop suite with Config.Resume
// set on every rnet end (issue 43): a C peer must see a plain rsocket
// connection, both as dialer and as listener. The socat volume tests are
// left out (the extension changes nothing once connected to a C peer, and
// they run at full length on their own). It runs in the race-free pass
// only (Makefile NORACE_TESTS), where the suite costs a fraction of its
// time under -race.
func TestInteropWithResume(t *testing.T) {
	if raceEnabled {
		t.Skip("runs without the race detector, in make test-device's race-free pass")
	}
	resumeOffered.Store(true)
	defer resumeOffered.Store(false)
	for _, tc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"PreloadCurlHTTP", TestPreloadCurlHTTP},
		{"PreloadCSenderGrowsRnetRing", TestPreloadCSenderGrowsRnetRing},
		{"RstreamClientDefaultTable", TestRstreamClientDefaultTable},
		{"RstreamClientKeepalive", TestRstreamClientKeepalive},
		{"RstreamServerDefaultTable", TestRstreamServerDefaultTable},
		{"RstreamBufferSizes", TestRstreamBufferSizes},
		{"RstreamInlineThresholds", TestRstreamInlineThresholds},
		{"RstreamClientKilled", TestRstreamClientKilled},
		{"RstreamIWARP", TestRstreamIWARP},
	} {
		t.Run(tc.name, tc.run)
	}
}
