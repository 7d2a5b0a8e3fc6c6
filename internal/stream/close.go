package stream

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// How a connection ends: half-closes, Close and its linger.

// CloseWrite: see rnet's Conn.CloseWrite.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("close", net.ErrClosed)
	}
	c.writeShut = true
	if c.path != pathUp {
		// SHUTDOWN must follow the bytes written while the path was
		// down: the engine that takes over sends it after them.
		c.closeWriteLater = true
		return nil
	}
	c.eng.CloseWrite()
	c.driveLocked()
	return nil
}

// CloseRead: see rnet's Conn.CloseRead.
func (c *Conn) CloseRead() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("close", net.ErrClosed)
	}
	c.readShut = true
	c.driveLocked()
	c.kickLocked()
	return nil
}

// Close: see rnet's Conn.Close.
func (c *Conn) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.closeErr = c.close()
	})
	if !first {
		return c.opError("close", net.ErrClosed)
	}
	return c.closeErr
}

func (c *Conn) close() error {
	c.mu.Lock()
	c.closing = true
	close(c.closed)
	c.eng.Uncork() // corked bytes must not wait on a completion within Linger
	c.driveLocked()
	c.kickLocked() // a Read or Write parked on the completion channel returns
	c.keepalive.Stop()
	lingerFor := c.linger
	var gone error
	if c.path == pathUp {
		gone = c.peerGoneLocked() // a failed completion no tick has seen yet
	}
	c.mu.Unlock()
	c.tellPeerGone(gone)
	c.readDL.Stop()
	c.writeDL.Stop()
	defer c.forget()

	lingered := make(chan struct{})
	linger := time.AfterFunc(lingerFor, func() {
		close(lingered)
		c.kick()
	})
	defer linger.Stop()
	abandoned := false
	if lingerFor <= 0 {
		abandoned = c.endResume()
	}
	// First the data already written, like a TCP FIN after the send
	// buffer drains. A resume under way, or one a path failure starts
	// meanwhile, goes on within Linger: what was written, and the end of
	// the stream, still reach the peer, as TCP retransmits after close.
	sent := c.closeWait(lingered, func() bool {
		return c.transportDown || c.fatal != nil || c.path == pathUp && (c.eng.Flushed() || c.eng.Finished())
	})
	abandoned = c.endResume() || abandoned
	c.mu.Lock()
	var closeErr error
	if abandoned {
		// As when Linger drops unsent bytes: the peer may lack some of
		// what was written, and sees the connection torn down.
		closeErr = fmt.Errorf("%w: the path had failed and no new path came within Linger (%v)", ring.ErrAborted, lingerFor)
	}
	switch {
	case c.transportDown || c.fatal != nil || c.eng.Err() != nil || c.eng.PeerDisconnected():
		// Nothing more can go out, or the peer is already gone.
	case sent:
		c.eng.Close()
	default:
		if dropped := c.eng.Abort(); dropped > 0 {
			// The peer sees the connection torn down, not a clean
			// end, and the caller learns that bytes were lost.
			closeErr = fmt.Errorf("%w: %d bytes written were not sent within Linger (%v)", ring.ErrAborted, dropped, lingerFor)
		}
	}
	c.driveLocked()
	c.mu.Unlock()
	// Then our DISCONNECT, so the peer sees an orderly close rather than
	// a torn-down queue pair.
	c.closeWait(lingered, func() bool {
		return c.eng.Flushed() || c.transportDown || c.fatal != nil || c.eng.Err() != nil
	})
	c.mu.Lock()
	qp := c.qp // no resume runs any more
	c.mu.Unlock()
	qp.Disconnect()
	qp.Shutdown()
	<-c.pusherDone
	// Once a caller still parked on the completion channel has left
	// (shutdown failed its wait), nothing touches the queue pair again.
	c.takeWaitForGood()
	c.mu.Lock()
	late := c.lends > 0
	c.destroyLate = late
	c.mu.Unlock()
	if late {
		// A ReadFrom or WriteTo has ring memory out: the last one to
		// return destroys the queue pair (see endLoanLocked).
		return c.opError("close", closeErr)
	}
	if err := c.releaseQP(); err != nil {
		closeErr = errors.Join(closeErr, err)
	}
	return c.opError("close", closeErr)
}

// endResume ends the connection's resumes: none starts from now on, and
// one under way ends at once; a connection it left between paths sends
// nothing more, and endResume reports that it left one so.
func (c *Conn) endResume() (abandoned bool) {
	c.mu.Lock()
	c.resumeAbandoned = true
	resuming, cancel := c.resumeDone, c.resumeCancel
	c.mu.Unlock()
	if resuming == nil {
		return false
	}
	cancel()
	<-resuming
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.path == pathUp {
		return false
	}
	c.path = pathUp
	c.failLocked(errClosedWhileResuming)
	return true
}

// releaseQP destroys the queue pair, which releases the rings' memory and
// what it pinned, and tells the Observer the connection is closed: once,
// from Close or, when Close left it to a ReadFrom or WriteTo that had ring
// memory out, from the last of those to return.
func (c *Conn) releaseQP() error {
	c.mu.Lock()
	qp := c.qp
	c.mu.Unlock()
	err := qp.Destroy()
	if c.set.Observer != nil {
		c.set.Observer.Closed(c)
	}
	return err
}

// closeWait drives the connection until cond (called with c.mu held) holds
// or timeout is closed, and reports whether cond held.
func (c *Conn) closeWait(timeout <-chan struct{}, cond func() bool) bool {
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return true
		}
		if isClosed(timeout) {
			return false
		}
		c.block(cond, c.changed, timeout, nil)
	}
}
