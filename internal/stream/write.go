package stream

import (
	"net"
	"os"
)

// Write: see rnet's Conn.Write. A Write that fits the send ring now, and
// finds no other Write between its parts, goes in under mu alone and
// crosses into C from here, as most Writes do; writeMu is for those that
// must wait for room.
func (c *Conn) Write(b []byte) (int, error) {
	if isClosed(c.writeDL.Wait()) {
		return c.writeInParts(b)
	}
	c.mu.Lock()
	if c.writing.Load() || c.closing || c.fatal != nil || c.waitsForPathLocked() || len(b) > c.eng.SendSpace() {
		c.mu.Unlock()
		return c.writeInParts(b)
	}
	n, mode, err := c.putLocked(b)
	if n > 0 {
		c.roundsLocked(mode, 0)
		c.finishStepLocked(mode)
	}
	if err != nil && c.resumesOnLocked(err) {
		c.mu.Unlock()
		return c.writeInParts(b) // held until the path is back
	}
	c.mu.Unlock()
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

// resumesOnLocked reports whether the engine's error err, met by a Write,
// is a failure of the path that a resume now handles: the step that found
// it may not have started one (it was the peer's step on a shared
// completion queue, say), so it starts here.
func (c *Conn) resumesOnLocked(err error) bool {
	c.checkPathLocked()
	return c.pathDownLocked()
}

// putLocked copies what fits of b into the send ring, and says how the
// step that posts it looks at completions (see writeModeLocked).
func (c *Conn) putLocked(b []byte) (n int, mode stepMode, err error) {
	wasCorked := c.eng.Corked()
	n, err = c.eng.Write(b)
	if n > 0 {
		c.wroteSinceRead = true
		mode = c.writeModeLocked(n, wasCorked)
	}
	return n, mode, err
}

// writeInParts writes b as room in the send ring allows, holding writeMu
// throughout.
func (c *Conn) writeInParts(b []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	// Cleared without mu: the last part went in under mu already, and
	// taking mu here would deadlock a Write that panics while holding it.
	defer c.writing.Store(false)
	written := 0
	spun := false
	for {
		if isClosed(c.writeDL.Wait()) {
			if isClosed(c.closed) {
				return written, c.opError("write", net.ErrClosed)
			}
			c.uncork()
			return written, c.opError("write", os.ErrDeadlineExceeded)
		}
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return written, c.opError("write", net.ErrClosed)
		}
		if c.fatal != nil {
			err := c.fatal
			c.mu.Unlock()
			return written, c.opError("write", err)
		}
		if c.pathDownLocked() {
			// The failed engine posts nothing: what its send ring had
			// room for waits for the engine that takes over.
			n, err := c.holdWriteLocked(b[written:])
			written += n
			c.mu.Unlock()
			switch {
			case err != nil:
				return written, c.opError("write", err)
			case written == len(b):
				return written, nil
			}
			c.block(c.writeReadyLocked, c.writable, c.writeDL.Wait(), c.closed)
			continue
		}
		c.writing.Store(true)
		// Room comes back with send completions: a Write that finds none
		// must have them wake whoever waits, before it waits itself.
		c.updateSendsNeededLocked()
		n, mode, err := c.putLocked(b[written:])
		if n > 0 {
			c.stepLocked(mode, 0)
		}
		written += n
		if err != nil && c.resumesOnLocked(err) {
			c.mu.Unlock()
			continue // held until the path is back
		}
		c.mu.Unlock()
		if err != nil {
			return written, c.opError("write", err)
		}
		// Like TCP, return once every byte is in the send buffer; what
		// waits there for credits the pusher sends.
		if written == len(b) {
			return written, nil
		}
		if n > 0 {
			spun = false
		}
		if !spun {
			spun = true
			// A writer waits for the peer's reader to free room; spinning
			// longer than BusyPoll would only take CPU from that reader.
			c.busyPoll(c.set.BusyPoll, c.writeReadyLocked, c.writeDL.Wait(), false)
			continue
		}
		c.block(c.writeReadyLocked, c.writable, c.writeDL.Wait(), c.closed)
	}
}
