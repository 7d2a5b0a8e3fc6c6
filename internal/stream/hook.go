package stream

import "github.com/rnet-dev/rnet/internal/ring"

// Test hooks of the package, each set only by tests.

// testHookAddRegion, set before any connection exists, fails the
// registration of a ring's new region, as a locked-memory limit would.
var testHookAddRegion func(kind ring.RegionKind, size int) error

// For the tests of other packages that run a Conn over a device and wait
// for it to settle.

// Drive steps the engine now as a blocked call would, polling its
// completions.
func (c *Conn) Drive() {
	c.mu.Lock()
	c.driveLocked()
	c.mu.Unlock()
}

// Tick does the keepalive timer's work now.
func (c *Conn) Tick() { c.tick() }

// RecvShrinkPending reports that the engine holds a smaller receive region
// for its next grant.
func (c *Conn) RecvShrinkPending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eng.RecvMovePending()
}

// WhileLocked runs f with the Conn's mu held, so that the tests of a queue
// pair can look at or change what the Conn calls it for under mu.
func (c *Conn) WhileLocked(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
}
