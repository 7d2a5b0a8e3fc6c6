package stream

import (
	"io"
	"net"
	"os"
	"time"
)

// Read: see rnet's Conn.Read. A Read that finds nothing spins for a window
// the spin policy (spin.go) gives it, then blocks; once data comes, it
// tells the policy how the wait went.
func (c *Conn) Read(b []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if len(b) == 0 {
		// As *net.TCPConn: nothing to wait for, so no deadline applies.
		if isClosed(c.closed) {
			return 0, c.opError("read", net.ErrClosed)
		}
		return 0, nil
	}
	var r readAttempt
	for {
		if isClosed(c.readDL.Wait()) {
			if isClosed(c.closed) {
				return 0, c.opError("read", net.ErrClosed)
			}
			c.uncork()
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
		c.mu.Lock()
		n, err := c.readLocked(b, &r)
		c.mu.Unlock()
		if n > 0 {
			c.endReadWait(&r)
			return n, nil
		}
		if err != nil {
			return 0, c.opError("read", err)
		}
		if !r.waiting {
			c.beginReadWait(&r)
			r.cutShort = !c.busyPoll(r.window, c.readReadyLocked, c.readDL.Wait(), r.reply)
			continue
		}
		r.blocked = true
		if r.measure && r.parkStart.IsZero() {
			r.parkStart = time.Now()
		}
		if c.block(c.readReadyLocked, c.readable, c.readDL.Wait(), c.closed) && r.measure {
			r.parked = true
		}
	}
}

// readAttempt is what one Read knows of its wait for data.
type readAttempt struct {
	waiting   bool          // the Read found nothing and began to wait
	reply     bool          // it waits for the answer to a Write
	rest      bool          // it waits for the rest of a reply (see restWindow)
	start     time.Time     // when the wait began, if reply
	window    time.Duration // the spin window of the wait
	measure   bool          // a park in this wait measures a park's cost
	parkStart time.Time     // when the first block began, if measure
	parked    bool          // a block did park, if measure
	streamed  bool          // the wait spun under streamSpin's rule
	blocked   bool          // the spin ended without data, and the Read blocked
	cutShort  bool          // the spin was left to another connection's caller or cut short for its work
}

// readLocked is one look of a Read: it returns what the engine holds, or
// why nothing will come (io.EOF passes through opError bare). Finding
// nothing, it posts the bytes autocorking holds back, since the peer may
// wait for them before it answers.
func (c *Conn) readLocked(b []byte, r *readAttempt) (int, error) {
	if c.closing {
		return 0, net.ErrClosed
	}
	if c.readShut {
		return 0, io.EOF
	}
	n, err := c.eng.Read(b)
	switch {
	case n == 0 && c.pathDownLocked():
		err = nil // the failed engine's error is not the connection's
	case err != nil && c.resumeFailed:
		err = c.fatal // says what the resume tried
	}
	if n > 0 {
		// Consuming may earn the peer a credit update: send it now.
		c.flushLocked()
		c.replyRest = c.wroteSinceRead
		c.wroteSinceRead = false
		return n, nil
	}
	if err == nil && c.fatal != nil {
		err = c.fatal
	}
	if !r.waiting {
		// What kind of wait this is is settled when it begins: a Write
		// while it waits does not make it a reply wait.
		r.reply = c.wroteSinceRead
		// The rest of a reply is worth a spin only if the part we have
		// may have been cut short; else the reply is all here.
		r.rest = c.replyRest && c.eng.MoreMayFollow()
	}
	if err == nil {
		c.uncorkLocked()
	}
	return 0, err
}

// beginReadWait gives a Read that found nothing its spin window. Only a
// Read that waits for the answer to our own Write (request and response)
// spins adaptively: a streaming reader's long spin would only take CPU
// from the writer, and it spins at all only while its spins catch data
// (streamSpin).
func (c *Conn) beginReadWait(r *readAttempt) {
	r.waiting = true
	switch {
	case r.reply:
		r.start = time.Now()
		r.window, r.measure = c.readWait.window(&c.set)
	case r.rest:
		r.window = c.readWait.restWindow(&c.set)
	default:
		r.window = c.streamSpin.window(c.set.BusyPoll)
		r.streamed = r.window > 0
	}
}

// endReadWait tells the spin policy how the wait of a Read that got data
// went, unless its spin did not run as the policy asked: a wait that parked
// at once because another connection's caller spun lasts a park longer
// than a spun one, which would turn this connection's spinning off.
func (c *Conn) endReadWait(r *readAttempt) {
	if r.cutShort {
		return
	}
	if r.waiting && r.reply {
		c.readWait.observe(time.Since(r.start), r.window, c.readWait.limit(&c.set))
		if r.parked {
			c.readWait.observePark(time.Since(r.parkStart))
		}
	}
	if r.streamed {
		c.streamSpin.observe(!r.blocked)
	}
}
