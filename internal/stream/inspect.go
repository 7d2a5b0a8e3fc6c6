package stream

// What the tests of other packages use to drive and look into a Conn that
// runs over a device.

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
