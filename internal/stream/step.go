package stream

import (
	"errors"
	"fmt"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// What a step does in its first crossing besides posting and polling.
const (
	stepArm             = wr.StepArm                    // the caller is about to wait
	stepTakeEventAndArm = wr.StepTakeEvent | wr.StepArm // the caller's wait has just ended
)

// stepMode says how a step looks at completions; the zero mode crosses
// into C only when there is work to post, and polls in that crossing.
type stepMode uint8

const (
	// stepPoll polls until the CQ is empty, crossing into C even with
	// nothing to post.
	stepPoll stepMode = 1 << iota
	// stepSpin is a busy-polling caller's: each crossing polls an empty CQ
	// up to spinPollTries times.
	stepSpin
	// stepNoReap posts without polling: the completions are left to
	// whoever waits next, so that the transfers just posted stay in
	// flight and the Writes that follow cork behind them (see
	// writeModeLocked).
	stepNoReap
)

// CompletionBatch is how many completions one step polls, in one crossing.
const CompletionBatch = 64

// spinPollTries is how many times a busy-polling step polls an empty CQ in
// its one crossing into C: counted, not timed, so that the Go side still
// checks the window, the deadline and whether to yield every few
// microseconds.
const spinPollTries = 16

// MaxStepRounds bounds the crossings of one step: a peer that keeps the CQ
// full (a flood of valid control messages) must not keep the connection's
// lock, and with it Close and the other callers, for ever.
const MaxStepRounds = 16

// driveLocked posts whatever work the engine has and polls completions into
// it, until the CQ is empty and nothing is left to post, and wakes whoever
// can now proceed. Each round is one crossing into C.
func (c *Conn) driveLocked() { c.stepLocked(stepPoll, 0) }

// drainLocked is driveLocked that goes on past the bound of one step until
// the CQ is empty: for news that must come after everything that arrived
// before it. The caller has moved the queue pair to the error state, so
// nothing completes any more but flushes of what is posted (and of what
// the drain reposts before it polls the first flush): the drain ends
// within the queue depths however fast the peer sends. A queue pair that
// goes on completing past that fails the connection rather than keep the
// lock.
func (c *Conn) drainLocked() {
	c.qp.CollectAll()
	layout := c.eng.Layout()
	limit := 1 + (layout.CQDepth+layout.RecvDepth)/(MaxStepRounds*CompletionBatch)
	for steps := 1; ; steps++ {
		if _, cut := c.stepLocked(stepPoll, 0); !cut {
			return
		}
		if steps > limit {
			c.failLocked(fmt.Errorf("%w: the queue pair (%d work requests deep) still completed a full batch %d polls after it was moved to the error state",
				ring.ErrPeerGone, layout.CQDepth, steps*MaxStepRounds))
			return
		}
	}
}

// flushLocked is driveLocked for a caller that needs no news from the CQ
// (a Read that found data): it crosses into C only when there is work to
// post.
func (c *Conn) flushLocked() { c.stepLocked(0, 0) }

// stepLocked steps the engine as mode says, with flags' extra work folded
// into the first round's crossing, then serves what the rounds left for
// it and wakes whoever can proceed. moved says work was posted or
// completions polled; cut says it stopped at MaxStepRounds with
// completions left in the CQ.
func (c *Conn) stepLocked(mode stepMode, flags wr.StepFlags) (moved, cut bool) {
	moved, cut = c.roundsLocked(mode, flags)
	if c.finishStepLocked(mode) {
		moved = true
	}
	return moved, cut
}

// finishStepLocked completes a step after its rounds: it widens the credit
// window and serves the ring's regions when the engine asks, posting what
// that frees in further rounds that poll only as they post, and wakes
// whoever can now proceed. moved says those rounds moved anything.
func (c *Conn) finishStepLocked(mode stepMode) (moved bool) {
	c.checkPathLocked()
	if c.path == pathSuspended {
		// The failed engine has nothing left to do.
		c.signalLocked()
		return false
	}
	more := mode &^ stepPoll
	if n := c.eng.CreditsWanted(); n > 0 {
		// The peer used up its credit window: widen it by what the
		// receive queue can back, and post the receives and the grant.
		c.eng.AddCredits(claimCredits(c.qp, n))
		m, _ := c.roundsLocked(more, 0)
		moved = moved || m
	}
	if c.eng.RegionWork() && c.serveRegionsLocked() {
		// A new region may make a buffer grant due, or let the send ring
		// move and take the writer's bytes: post what it freed.
		m, _ := c.roundsLocked(more, 0)
		moved = moved || m
	}
	if c.path == pathUp && c.eng.Err() != nil {
		// The rounds above met the failure of the path.
		c.checkPathLocked()
	}
	c.signalLocked()
	c.pushIfBlockedLocked()
	c.updateSendsNeededLocked()
	return moved
}

// updateSendsNeededLocked tells the queue pair whether the connection needs
// the completions of its sends to go on: bytes wait for one (held back by
// autocorking, or unposted for want of a send queue entry or of room), a
// control message or credit update is due, a Write waits for room in the
// send ring, or Close drains. A Read that waits for data alone needs none:
// the peer's messages wake it, and the completion of a send it has no use
// for must not.
func (c *Conn) updateSendsNeededLocked() {
	// A switch to a new path waits for its own exchange's completion too,
	// which moves nothing Blocked looks at.
	need := c.closing || c.writing.Load() || c.eng.Blocked() || c.path == pathSwitching
	if need != c.sendsNeeded {
		c.sendsNeeded = need
		c.qp.NeedSends(need)
	}
}

// serveRegionsLocked registers the regions the engine wants and
// deregisters the ones it retired, and reports whether it added any. A
// registration that fails (the locked-memory limit, say) leaves the ring
// as it is: the connection goes on at its current size.
func (c *Conn) serveRegionsLocked() (added bool) {
	for {
		kind, size, ok := c.eng.RegionWanted()
		if !ok {
			break
		}
		r, err := c.qp.AddRegion(kind, size)
		if hook := testHookAddRegion; hook != nil && err == nil {
			if err = hook(kind, size); err != nil {
				c.qp.RemoveRegion(r)
			}
		}
		if err != nil {
			c.eng.DeclineRegion(kind) // counted in Stats.RegionsDeclined
			c.ringResized(kind, size, err)
			continue
		}
		if err := c.eng.AddRegion(kind, r); err != nil {
			c.qp.RemoveRegion(r) // unreachable: it is what RegionWanted asked for
			continue
		}
		added = true
		c.ringResized(kind, size, nil)
	}
	c.retiredRegions = c.eng.RetiredRegions(c.retiredRegions[:0])
	if c.lends > 0 {
		// A loan may be reading or writing it.
		c.lentRegions = append(c.lentRegions, c.retiredRegions...)
		clear(c.retiredRegions)
		return added
	}
	for i, r := range c.retiredRegions {
		// A region that fails to deregister stays in the queue pair's
		// list, and teardown tries again.
		c.qp.RemoveRegion(r)
		c.retiredRegions[i] = ring.Region{}
	}
	return added
}

// ringResized tells Settings.RingResized, if set, of a region served.
func (c *Conn) ringResized(kind ring.RegionKind, size int, err error) {
	if f := c.set.RingResized; f != nil {
		go f(c, kind, size, err)
	}
}

// claimCredits returns how many of n more receives q can back: all of them
// on a receive queue of its own, which is as deep as the largest window.
func claimCredits(q QueuePair, n int) int {
	if c, ok := q.(CreditClaimer); ok {
		return c.ClaimCredits(n)
	}
	return n
}

// roundsLocked is stepLocked without finishing: up to MaxStepRounds
// crossings into C, each posting what the engine has and polling what
// completed, while the CQ may hold more (stepPoll) or completions freed
// work to post.
func (c *Conn) roundsLocked(mode stepMode, flags wr.StepFlags) (moved, cut bool) {
	if c.path == pathSuspended {
		return false, false // nothing steps the failed queue pair
	}
	poll := mode&stepPoll != 0
	for round := 1; ; round++ {
		c.recvs, c.sends = c.recvs[:0], c.sends[:0]
		switch {
		case c.fatal != nil:
		case poll && !c.qp.Collected() || c.eng.RepostDue():
			// Receives go first: the engine only grants credits for
			// receives that are back on the queue.
			c.recvs = c.eng.PostRecvs(c.recvs)
			c.sends = c.eng.PostSends(c.sends)
		default:
			// A crossing only to repost receives can wait (see
			// Engine.RepostDue): they go with this round's sends if
			// there are any, else with the next crossing (a poll that
			// finds its completions already collected makes none). No
			// credit update is due, so PostSends does not miss one.
			c.sends = c.eng.PostSends(c.sends)
			if len(c.sends) > 0 {
				c.recvs = c.eng.PostRecvs(c.recvs)
			}
		}
		if !poll && len(c.recvs) == 0 && len(c.sends) == 0 {
			break
		}
		wcs := c.wcs
		if c.fatal != nil || mode&stepNoReap != 0 {
			wcs = c.wcs[:0] // a failed QP only flushes; the engine has failed too
		}
		tries := 1
		if flags == 0 && mode&stepSpin != 0 && len(wcs) > 0 {
			tries = spinPollTries
		}
		start, timed := c.postStartLocked()
		n, err := c.qp.Step(flags, c.recvs, c.sends, wcs, tries)
		c.polls++
		c.notePostLocked(start, timed)
		if err != nil {
			switch {
			case c.path == pathDraining:
				// A failed path's queue pair may refuse even a poll (its
				// device removed): the drain ends, and the completions it
				// would have found count as lost (suspendDrainedLocked).
			case errors.Is(err, ErrQueuePairGone) && c.resumableLocked(err):
				// The path failed under the post: the engine's error
				// makes finishStepLocked resume, as a flush would.
				c.eng.Fail(err)
			case errors.Is(err, ErrQueuePairGone) && c.path == pathSwitching:
				c.newPathFailedLocked(err) // the switch tries another path
			default:
				c.failLocked(err)
			}
			break
		}
		if flags != 0 {
			c.armed = true
		}
		flags = 0
		if n > 0 {
			c.eng.Complete(c.wcs[:n]) // a fatal error is kept in eng.Err
		}
		if n > 0 || len(c.recvs) > 0 || len(c.sends) > 0 {
			moved = true
		}
		if (c.closing || c.readShut) && !c.recvLent {
			c.discardInboundLocked()
		}
		// A full batch may have left more behind; otherwise go round
		// again only if the completions freed work to post.
		poll = n == len(wcs) && n > 0
		if poll && round >= MaxStepRounds {
			// Completions that came before the last arm left no event,
			// so the next wait must poll before it parks.
			c.armed = false
			cut = true
			break
		}
	}
	return moved, cut
}

// discardInboundLocked consumes received bytes nobody will read, so the peer
// keeps its credits and can go on reading what we still have to send.
func (c *Conn) discardInboundLocked() {
	if c.eng.ReadableBytes() == 0 {
		return
	}
	if c.drainBuf == nil {
		c.drainBuf = make([]byte, 64<<10)
	}
	for {
		n, err := c.eng.Read(c.drainBuf)
		if n == 0 || err != nil {
			return
		}
	}
}

// failLocked ends the connection for good with err. Its queue pair goes
// down with it and the peer is told, as a TCP connection that times out or
// meets an error is closed: a peer that goes on (a host that thaws, one
// that broke the protocol) must not find its sends acknowledged until our
// application closes the connection.
func (c *Conn) failLocked(err error) {
	if c.fatal == nil {
		c.fatal = err
		c.eng.Fail(err)
		c.qp.Disconnect()
		c.kickLocked()
		c.forgetLater()
	}
}

// signalLocked wakes the calls parked on their channels (see wait.go) whose
// condition may now hold.
func (c *Conn) signalLocked() {
	if c.queued == 0 {
		return
	}
	c.readied = true
	failed := c.failedLocked()
	if failed || c.eng.Readable() || c.readShut {
		notify(c.readable)
	}
	if failed || c.eng.Writable() {
		notify(c.writable)
	}
	notify(c.changed)
}

// readReadyLocked reports whether a blocked Read has something to return.
func (c *Conn) readReadyLocked() bool {
	if c.pathDownLocked() {
		// The failed engine's error is not the connection's: only the
		// bytes it received are news.
		return c.eng.ReadableBytes() > 0 || c.readShut || c.closing || c.fatal != nil
	}
	return c.eng.Readable() || c.readShut || c.closing
}

// writeReadyLocked reports whether a blocked Write can make progress.
func (c *Conn) writeReadyLocked() bool {
	if c.pathDownLocked() {
		return c.closing || c.fatal != nil || c.writeShut || len(c.heldWrites) < c.heldRoom
	}
	return c.eng.Writable() || c.closing
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// pushIfBlockedLocked starts the pusher when the engine waits for a
// completion and nobody owns the wait.
func (c *Conn) pushIfBlockedLocked() {
	if !c.waitOwned && !c.pushing && !c.closing && c.fatal == nil && c.path == pathUp && c.eng.Blocked() {
		c.pushing = true
		c.readied = true
		c.handOffs++
		notify(c.pushWake)
	}
}

// kickLocked wakes the wait's owner, for news that does not come through
// the CQ (Close, CloseRead, a transport event).
func (c *Conn) kickLocked() {
	if c.waitOwned {
		c.qp.Kick()
	}
}
