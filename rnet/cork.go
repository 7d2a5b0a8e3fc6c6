package rnet

import (
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// Autocorking (Config.NoDelay off): the engine holds small writes back while
// a transfer of the connection is in flight (ring.Engine.Corked); this file
// decides when a Write looks at completions, and makes sure nobody waits on
// corked bytes.

// reapDelay is how long after a Write that left its transfers unreaped the
// next Write reaps first: about a small RDMA write's round trip to the
// peer's device. Writes closer together than that cork behind those
// transfers; a Write after a pause must not cork behind a transfer that
// has long completed, and goes out at once.
const reapDelay = 10 * time.Microsecond

// monoBase anchors monotonic, which reads only the monotonic clock: the
// wall clock time.Now also reads costs as much again on some machines, on
// a path taken once per Write.
var monoBase = time.Now()

func monotonic() time.Duration { return time.Since(monoBase) }

// postWriteLocked posts the n bytes a Write took. With autocorking on, for
// a Write smaller than a transfer, while the send ring and the credits have
// room and the last Write ended moments ago, it posts without polling: the
// completions are left to whoever waits next (a Read, the pusher), so the
// transfers just posted stay in flight and the Writes that follow cork
// behind them, as TCP's do behind packets its device has not yet sent.
func (c *conn) postWriteLocked(n int) {
	now := monotonic()
	send, _ := c.eng.RingSizes()
	crossed := true
	if !c.set.ring.Autocork || n >= ring.MaxTransfer || now-c.lastWriteEnd >= reapDelay ||
		c.eng.SendSpace() < send/2 || c.eng.Credits() < 2 {
		c.driveLocked()
	} else {
		c.reapless = true
		crossed, _ = c.stepLocked(false, 0)
		c.reapless = false
	}
	if crossed {
		// A Write that waited in a crossing for the device is still
		// back to back with the next one.
		now = monotonic()
	}
	c.lastWriteEnd = now
}

// uncorkLocked posts the bytes autocorking holds back, for a caller about
// to wait or give up waiting: the peer may be waiting for them, and nobody
// should wait on a cork.
func (c *conn) uncorkLocked() {
	if c.eng.Corked() {
		c.eng.Uncork()
		c.flushLocked()
	}
}

// uncork is uncorkLocked for a caller without c.mu.
func (c *conn) uncork() {
	c.mu.Lock()
	if !c.closing {
		c.uncorkLocked()
	}
	c.mu.Unlock()
}
