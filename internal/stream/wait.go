package stream

import (
	"runtime"
	"time"
)

// Who waits for completions.
//
// A connection's completions wake it through one wait (QueuePair.wait: on a
// device, its poll group hands them over, see package rnet), and at most
// one goroutine waits there at a time: the wait's owner. c.waitOwned
// (under c.mu) says the wait is taken. The owner is, in this order of
// preference:
//
//   - the first Read, Write or Close that blocks (block): the goroutine that
//     needs the news is woken, and it steps the engine itself;
//   - the pusher, while no call is blocked but the engine waits for a
//     completion (bytes a returned Write left in the send ring, a credit
//     update the peer needs);
//   - at the end, Close, which takes the wait for good (takeWaitForGood) so
//     that nothing touches the queue pair once it is destroyed.
//
// A call that blocks while the wait is taken parks on its own channel
// (readable, writable or changed) and counts itself in c.queued; whoever
// steps the engine signals those channels (signalLocked). An owner that
// leaves (handOffWait) passes the wait through c.waitFree to a queued call,
// or else starts the pusher if the engine still needs a completion, so the
// wait never rests with nobody while work is pending. News that does not
// come through the CQ (Close, CloseRead, a deadline, a transport event)
// kicks the owner's wait. A spinning call (busyPoll) steps the engine
// without taking the wait.
//
// c.armed says the CQ was armed and every event since was taken by a step
// that armed it again: any completion not yet polled has then left an
// event, so the owner may wait without first crossing into C to arm and
// poll. (A poll group keeps its CQ armed for its waiting members itself,
// and its members' waits return at once while completions are collected.)

// block parks the caller until ready (called with c.mu held) may have become
// true, stop or cancel is closed (either may be nil), or the connection
// fails. The first blocked caller takes the wait and steps the engine when
// it wakes, rather than a progress goroutine that would then wake the
// reader. Later callers park on wake until the wait
// is handed to them. The caller re-checks its condition after block
// returns; wakeups may be spurious. parked says the caller did wait, rather
// than find its condition already true.
func (c *Conn) block(ready func() bool, wake chan struct{}, stop, cancel <-chan struct{}) (parked bool) {
	c.mu.Lock()
	// Whatever the caller waits for, the owner's wait must let the
	// completions it needs wake it.
	c.updateSendsNeededLocked()
	// While the path is down nobody waits on the queue pair: a resume
	// wakes the callers on their channels.
	if c.waitOwned || c.waitsForPathLocked() {
		// Look again under the lock that signalLocked holds: from here on
		// a change is signalled to us, since queued is no longer 0.
		if ready() || c.failedLocked() {
			c.mu.Unlock()
			return false
		}
		free := c.waitFree
		if !c.waitOwned {
			free = nil // nobody owns the wait to hand it over
		}
		c.queued++
		c.parks++
		c.mu.Unlock()
		handedOver := false
		select {
		case <-wake:
		case <-free:
			handedOver = true
		case <-stop:
		case <-cancel:
		}
		c.mu.Lock()
		c.queued--
		if !handedOver || c.waitOwned {
			// Whoever handed the wait over (to any queued caller) may
			// have stopped pushing for an engine that still needs it,
			// and this caller may not come back: if nobody else is
			// queued, the pusher takes over.
			if !c.waitOwned && c.queued == 0 {
				c.pushIfBlockedLocked()
			}
			c.mu.Unlock()
			return true
		}
		// The wait was handed to us: take it now, even if we are about
		// to leave, so that it never rests with nobody (handOffWait
		// passes it on).
		parked = true
	}
	c.waitOwned = true
	c.mu.Unlock()
	if c.awaitEvent(func() bool {
		return ready() || c.failedLocked() || isClosed(stop) || isClosed(cancel)
	}) {
		parked = true
	}
	c.handOffWait()
	return parked
}

// awaitEvent is one round of the wait's owner: arm the CQ and step the
// engine; unless done (called with c.mu held) now holds, wait for the next
// event and step again, taking the event and arming again in that step's
// crossing. The CQ so stays armed, and the next wait crosses into C
// beforehand only if it has work to post. After shutdown the wait fails for
// good, and the caller then sees why. parked says the wait found no event at
// first and parked.
func (c *Conn) awaitEvent(done func() bool) (parked bool) {
	c.mu.Lock()
	if c.armed {
		// Nothing to poll: whatever completed since the last poll has
		// left an event, and wait returns at once for it.
		c.flushLocked()
	} else {
		// Arm before polling, in the same crossing: a completion that
		// lands after the poll then still produces an event for wait.
		c.stepLocked(stepPoll, stepArm)
	}
	c.updateSendsNeededLocked()
	// A step cut short by its bound leaves completions that came before
	// the arm, which leave no event: the caller must step again, not wait.
	// A path that failed leaves nothing to wait for on its queue pair.
	finished := done() || !c.armed || c.waitsForPathLocked()
	qp := c.qp
	c.mu.Unlock()
	if finished {
		return false
	}
	parked, err := qp.Wait()
	c.mu.Lock()
	if parked {
		c.parks++
	}
	if err == nil {
		c.stepLocked(stepPoll, stepTakeEventAndArm)
	}
	c.mu.Unlock()
	return parked
}

// handOffWait gives up the wait: to a queued caller if there is one, else
// to the pusher if the engine needs it.
func (c *Conn) handOffWait() {
	c.mu.Lock()
	c.waitOwned = false
	handOff := c.queued > 0
	if handOff {
		c.handOffs++
	} else {
		c.pushIfBlockedLocked()
	}
	c.mu.Unlock()
	if handOff {
		notify(c.waitFree)
	}
}

// takeWaitForGood makes the caller the wait's owner and never gives it
// back: Close, before it destroys the queue pair.
func (c *Conn) takeWaitForGood() { c.takeWait() }

// takeWait makes the caller the wait's owner, once whoever owns it has
// handed it over; the caller gives it back with handOffWait.
func (c *Conn) takeWait() {
	for {
		c.mu.Lock()
		if !c.waitOwned {
			c.waitOwned = true
			c.mu.Unlock()
			return
		}
		c.queued++
		c.mu.Unlock()
		<-c.waitFree
		c.mu.Lock()
		c.queued--
		c.mu.Unlock()
	}
}

// pusher owns the wait on behalf of nobody in particular while the engine
// has work that waits for a completion (see Engine.Blocked) and no Read,
// Write or Close is blocked. It is parked on pushWake the rest of the time,
// so a busy connection's events wake the caller that waits for them.
func (c *Conn) pusher() {
	defer close(c.pusherDone)
	for {
		select {
		case <-c.pushWake:
		case <-c.closed:
			return
		}
		for {
			c.mu.Lock()
			if c.waitOwned || c.closing || c.fatal != nil || c.path != pathUp || !c.eng.Blocked() {
				c.pushing = false
				c.mu.Unlock()
				break
			}
			c.waitOwned = true
			c.mu.Unlock()
			c.awaitEvent(func() bool {
				return c.fatal != nil || !c.eng.Blocked() || c.queued > 0 || c.closing
			})
			c.mu.Lock()
			c.waitOwned = false
			handOff := c.queued > 0
			if handOff {
				// Stop pushing before the wait changes hands, so that a
				// caller that receives it and leaves can start us again
				// (see block).
				c.pushing = false
				c.handOffs++
			}
			c.mu.Unlock()
			if handOff {
				notify(c.waitFree) // a caller blocked meanwhile: the wait is its now
				break
			}
		}
	}
}

// busyPoll steps the connection for up to window, until ready reports true
// or deadline is closed, so that a reply microseconds away does not cost a
// park and a wakeup. It does not take the wait. On a CQ shared with other
// connections it spins only if no other caller does, and only while its
// polls find nothing for the others (see SpinSharer). reply says the
// caller waits for the answer to its own Write. full is false when it left
// the spin to another caller or cut it short for their work: then how the
// wait went says nothing about whether spinning pays this connection.
func (c *Conn) busyPoll(window time.Duration, ready func() bool, deadline <-chan struct{}, reply bool) (full bool) {
	if window <= 0 {
		return true
	}
	// kickTo is the queue pair now without a lock: a resume that replaces
	// it meanwhile ends the spin's steps (the path is not up).
	sharer, _ := (*c.kickTo.Load()).(SpinSharer)
	if s := sharer; s != nil {
		if !s.TrySpin() {
			// Another connection's caller spins on the shared CQ and
			// will wake ours: park at once.
			c.mu.Lock()
			c.spinsDeferred++
			c.mu.Unlock()
			return false
		}
		defer s.EndSpin()
	}
	start := time.Now()
	end := start.Add(window)
	// A clock read can cost more than a poll under emulation, so the clock
	// is read about eight times per window, at most 32 rounds apart, at a
	// stride that follows the measured round time.
	look, lastLook, lastSpin := 1, start, 0
	for spin := 1; ; spin++ {
		c.mu.Lock()
		if c.closing {
			// Close may destroy the queue pair once it owns the wait,
			// which a spinner does not hold.
			c.mu.Unlock()
			return true
		}
		if spin == 1 {
			c.spins++
		}
		moved, _ := c.stepLocked(stepPoll|stepSpin, 0)
		ok := ready() || c.fatal != nil || c.closing
		// Once the spin's polls woke another connection's waiter, the
		// CPU is that connection's: its steps and the group's channel
		// will wake this one.
		left := !ok && sharer != nil && sharer.SpinWokeOthers()
		if left {
			c.spinsLeft++
		}
		yield := (moved || spin == 1) && c.readied || spin == 1 && reply
		if yield {
			c.readied = false
		}
		c.mu.Unlock()
		if ok || left {
			return !left
		}
		if spin == look {
			now := time.Now()
			if !now.Before(end) || isClosed(deadline) {
				return true
			}
			perRound := max(now.Sub(lastLook)/time.Duration(spin-lastSpin), 1)
			look += int(min(max(window/8/perRound, 1), 32))
			lastLook, lastSpin = now, spin
		}
		// A goroutine this connection readied (its pusher, a queued
		// caller) sits in this P's runnext, where an idle P steals it only
		// after a delay: it would wait for the spin to end. So yield after
		// a round that moved something, and once at the start of a reply
		// wait. Empty rounds never yield: a yield costs as much as a poll.
		if yield {
			runtime.Gosched()
		}
	}
}
