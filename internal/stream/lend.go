package stream

import (
	"io"
	"net"
	"os"

	"github.com/rnet-dev/rnet/internal/ring"
)

// ReadFrom and WriteTo copy between the rings and the caller's reader or
// writer without a buffer of their own: the engine lends them ring memory
// (ring.LendSend, ring.RecvSpan), and they call the reader or writer with
// mu released, so that a slow one holds up no completion, keepalive or
// Close. While a loan runs, the regions the engine retires stay registered
// (serveRegionsLocked), discarding inbound bytes waits (a loan of received
// bytes consumes them itself), and Close leaves the queue pair's teardown,
// which releases the rings' memory, to the last loan to end.

// ReadFrom: see rnet's Conn.ReadFrom.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	// Cleared without mu, as in writeInParts.
	defer c.writing.Store(false)
	var total int64
	spun := false
	for {
		if isClosed(c.writeDL.Wait()) {
			if isClosed(c.closed) {
				return total, c.opError("write", net.ErrClosed)
			}
			c.uncork()
			return total, c.opError("write", os.ErrDeadlineExceeded)
		}
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return total, c.opError("write", net.ErrClosed)
		}
		if c.fatal != nil {
			err := c.fatal
			c.mu.Unlock()
			return total, c.opError("write", err)
		}
		if c.pathDownLocked() {
			// Nothing is lent while the path is down: wait for the
			// engine that takes over (room for held Writes is no news
			// to a loan, and waiting on it would spin).
			c.mu.Unlock()
			c.block(c.pathUpLocked, c.writable, c.writeDL.Wait(), c.closed)
			continue
		}
		c.writing.Store(true)
		c.updateSendsNeededLocked()
		lentFrom := c.eng
		span := c.eng.LendSend()
		if span == nil {
			if _, err := c.eng.Write(nil); err != nil {
				c.mu.Unlock()
				return total, c.opError("write", err)
			}
			c.mu.Unlock()
			// No room: wait for the peer's reader as writeInParts does.
			if !spun {
				spun = true
				c.busyPoll(c.set.BusyPoll, c.writeReadyLocked, c.writeDL.Wait(), false)
				continue
			}
			c.block(c.writeReadyLocked, c.writable, c.writeDL.Wait(), c.closed)
			continue
		}
		spun = false
		c.lends++
		c.mu.Unlock()

		n, rerr := c.readLent(r, span)
		if n < 0 || n > len(span) {
			n, rerr = 0, errInvalidRead
		}

		c.mu.Lock()
		var written int
		var werr error
		if lentFrom != c.eng || c.path != pathUp {
			// The path failed while the reader ran: its bytes go to the
			// engine that carries the stream on.
			written, werr = c.commitResumedLocked(lentFrom, span[:n])
		} else {
			wasCorked := c.eng.Corked()
			written, werr = c.eng.CommitSend(n)
			if written > 0 {
				c.wroteSinceRead = true
				c.stepLocked(c.writeModeLocked(written, wasCorked), 0)
			}
		}
		late, retired := c.endLoanLocked()
		c.mu.Unlock()
		c.destroyIf(late, retired)
		total += int64(written)
		switch {
		case c.isClosing():
			return total, c.opError("write", net.ErrClosed)
		case werr != nil:
			return total, c.opError("write", werr)
		case written != n:
			// Bytes read from r that the ring did not take are lost to
			// the stream: say so rather than go on without them.
			return total, c.opError("write", io.ErrShortWrite)
		case rerr == io.EOF:
			return total, nil
		case rerr != nil:
			return total, rerr
		}
	}
}

// errInvalidRead is a reader's count outside what it was given, as io.Copy
// reports it.
var errInvalidRead = io.ErrShortBuffer

// WriteTo: see rnet's Conn.WriteTo.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	var total int64
	var r readAttempt
	var one [1]byte
	for {
		if isClosed(c.readDL.Wait()) {
			if isClosed(c.closed) {
				return total, c.opError("read", net.ErrClosed)
			}
			c.uncork()
			return total, c.opError("read", os.ErrDeadlineExceeded)
		}
		c.mu.Lock()
		var span []byte
		if !c.closing && !c.readShut {
			span = c.eng.RecvSpan()
		}
		if len(span) == 0 {
			// Nothing to lend: ask as Read would, which says why (EOF, a
			// failure) or uncorks before the wait. It takes a byte only
			// from a message RecvSpan does not show (an empty one first).
			n, err := c.readLocked(one[:], &r)
			c.mu.Unlock()
			if n > 0 {
				m, werr := w.Write(one[:n])
				total += int64(m)
				if werr != nil {
					return total, werr
				}
				continue
			}
			switch {
			case err == io.EOF:
				return total, nil
			case err != nil:
				return total, c.opError("read", err)
			}
			if !r.waiting {
				c.beginReadWait(&r)
				r.cutShort = !c.busyPoll(r.window, c.readReadyLocked, c.readDL.Wait(), r.reply)
				continue
			}
			r.blocked = true
			c.block(c.readReadyLocked, c.readable, c.readDL.Wait(), c.closed)
			continue
		}
		c.lends++
		c.recvLent = true
		c.mu.Unlock()

		n, werr := c.writeLent(w, span)
		if n < 0 || n > len(span) {
			n, werr = 0, errInvalidWrite
		}

		c.mu.Lock()
		c.recvLent = false
		if n > 0 && !c.closing {
			// The bytes lent are the oldest unread of the engine that
			// holds the stream's unread bytes: the one a switch takes
			// over from until it has.
			eng := c.eng
			if c.path == pathSwitching {
				eng = c.oldEng
			}
			eng.ConsumeRecv(n)
			// Consuming may earn the peer a credit update: send it now.
			c.flushLocked()
			c.replyRest = c.wroteSinceRead
			c.wroteSinceRead = false
		}
		late, retired := c.endLoanLocked()
		c.mu.Unlock()
		c.destroyIf(late, retired)
		total += int64(n)
		if n > 0 {
			c.endReadWait(&r)
			r = readAttempt{}
		}
		switch {
		case werr != nil:
			return total, werr
		case n < len(span):
			return total, io.ErrShortWrite
		}
	}
}

// errInvalidWrite is a writer's count outside what it was given.
var errInvalidWrite = io.ErrShortWrite

// endLoanLocked ends a loan: once none runs, it deregisters the regions
// retired meanwhile, and reports whether the queue pair is to be destroyed
// now, Close having left that to the last loan, and which queue pairs that
// resumes left behind are.
func (c *Conn) endLoanLocked() (destroy bool, retired []QueuePair) {
	c.lends--
	if c.lends > 0 {
		return false, nil
	}
	for i, r := range c.lentRegions {
		c.qp.RemoveRegion(r)
		c.lentRegions[i] = ring.Region{}
	}
	c.lentRegions = c.lentRegions[:0]
	destroy, c.destroyLate = c.destroyLate, false
	retired, c.retiredQPs = c.retiredQPs, nil
	return destroy, retired
}

// readLent is r.Read on a send loan, and writeLent w.Write on a loan of
// received bytes: if the caller's reader or writer panics, the loan ends
// (nothing committed or consumed) before the panic goes on up, so that a
// recovered panic leaves a connection that Close still tears down.
func (c *Conn) readLent(r io.Reader, span []byte) (int, error) {
	returned := false
	defer func() {
		if !returned {
			c.abandonLoan(true)
		}
	}()
	n, err := r.Read(span)
	returned = true
	return n, err
}

func (c *Conn) writeLent(w io.Writer, span []byte) (int, error) {
	returned := false
	defer func() {
		if !returned {
			c.abandonLoan(false)
		}
	}()
	n, err := w.Write(span)
	returned = true
	return n, err
}

// abandonLoan ends a loan whose reader or writer did not return.
func (c *Conn) abandonLoan(send bool) {
	c.mu.Lock()
	if send {
		c.eng.CommitSend(0)
	} else {
		c.recvLent = false
	}
	late, retired := c.endLoanLocked()
	c.mu.Unlock()
	c.destroyIf(late, retired)
}

// destroyIf releases the queue pair for a Close that left it to a loan,
// and the queue pairs resumes left to it.
func (c *Conn) destroyIf(late bool, retired []QueuePair) {
	for _, qp := range retired {
		qp.Destroy()
	}
	if late {
		c.releaseQP()
	}
}

// commitResumedLocked ends a send loan of lentFrom, whose path failed while
// the reader filled b: lentFrom takes nothing more, so once the path is up
// again b goes to the engine that carries the stream on (its ring holds
// at least what lentFrom's had room for). It waits for that with mu
// released, the loan still counted, so that b stays mapped, up to the
// write deadline.
func (c *Conn) commitResumedLocked(lentFrom *ring.Engine, b []byte) (int, error) {
	lentFrom.CommitSend(0)
	for c.path != pathUp && !c.closing && c.fatal == nil {
		if isClosed(c.writeDL.Wait()) {
			// As a Write's would: the reader's bytes are lost to the
			// stream, and ReadFrom says so.
			return 0, os.ErrDeadlineExceeded
		}
		c.mu.Unlock()
		c.block(c.pathUpLocked, c.writable, c.writeDL.Wait(), c.closed)
		c.mu.Lock()
	}
	switch {
	case c.closing:
		return 0, net.ErrClosed
	case c.fatal != nil:
		return 0, c.fatal
	}
	n, err := c.eng.Write(b)
	if n > 0 {
		c.wroteSinceRead = true
		c.driveLocked()
	}
	return n, err
}

// pathUpLocked reports that a loan's wait for a new path is over: the
// path is up, or the connection closing.
func (c *Conn) pathUpLocked() bool { return c.path == pathUp || c.closing }

// isClosing reports whether Close has begun.
func (c *Conn) isClosing() bool { return isClosed(c.closed) }
