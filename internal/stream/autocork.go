package stream

import (
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// Autocorking (Settings.Ring.Autocork): the engine holds small writes back while
// a transfer of the connection is in flight (ring.Engine.Corked); this file
// decides when a Write looks at completions, and makes sure nobody waits on
// corked bytes.

// DefaultReapDelay is how long after a transfer was posted that a Write behind it
// reaps completions before it decides whether to cork: about a small RDMA
// write's round trip to the peer's device. A Write within that time corks
// behind the transfer; a Write after a pause must not cork behind one that
// has long completed, and goes out at once.
const DefaultReapDelay = 10 * time.Microsecond

// corkWindow is how long after a post a Write corks behind it. On hardware
// a post is a doorbell and the transfer completes about a round trip
// later: Settings.ReapDelay. A device in software (rxe, siw) does a transfer's work
// inside the call that posts it, so its completion is there when the post
// returns and corking only "while a transfer is in flight" would hold
// nothing back; there the window is as long as recent posts took, so that
// the writes made meanwhile coalesce into the next transfer as they would
// behind a hardware device that was still busy.
func (c *Conn) corkWindow() time.Duration {
	return max(c.set.ReapDelay, c.postCost)
}

// writeModeLocked is how the step that posts the n bytes a Write took looks
// at completions; wasCorked says bytes were corked before it. With
// autocorking on, for a Write smaller than a transfer, while the send ring
// and the credits have room, it posts without polling (stepNoReap): the
// completions are left to whoever waits next (a Read, the pusher), so the
// transfers just posted stay in flight and the Writes that follow cork
// behind them, as TCP's do behind packets its device has not yet sent. A
// Write that would cork behind a transfer posted corkWindow ago or longer
// goes out at once instead, and reaps in the same crossing.
func (c *Conn) writeModeLocked(n int, wasCorked bool) stepMode {
	send, _ := c.eng.RingSizes()
	if !c.eng.Autocork() || n >= ring.MaxTransfer || c.eng.SendSpace() < send/2 || c.eng.Credits() < 2 {
		return stepPoll
	}
	if !wasCorked && c.eng.InFlight() > 0 && monotonic()-c.lastPost >= c.corkWindow() {
		// What is in flight has most likely completed: polling for
		// it first would cost a crossing of its own.
		c.eng.Uncork()
		return stepPoll
	}
	return stepNoReap
}

// uncorkLocked posts the bytes autocorking holds back, for a caller about
// to wait or give up waiting: the peer may be waiting for them, and nobody
// should wait on a cork.
func (c *Conn) uncorkLocked() {
	if c.eng.Corked() {
		c.eng.Uncork()
		c.flushLocked()
	}
}

// uncork is uncorkLocked for a caller without c.mu.
func (c *Conn) uncork() {
	c.mu.Lock()
	if !c.closing {
		c.uncorkLocked()
	}
	c.mu.Unlock()
}
