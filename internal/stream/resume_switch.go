package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
)

// ResumeError is how a connection fails when its path failed and resuming
// it did not work: errors.Is matches both the path's failure and what the
// resume met.
type ResumeError struct {
	Cause error         // why the path failed
	Err   error         // why the resume failed: the Resumer's error, or the exchange's
	Took  time.Duration // from the failure to giving up
}

func (e *ResumeError) Error() string {
	if errors.Is(e.Err, ErrResumeLimit) {
		return "rnet: the path failed (" + e.Cause.Error() + ") and was not resumed: " + e.Err.Error()
	}
	return "rnet: the path failed (" + e.Cause.Error() + ") and resuming it failed after " +
		e.Took.Round(time.Millisecond).String() + ": " + e.Err.Error()
}

func (e *ResumeError) Unwrap() []error { return []error{e.Cause, e.Err} }

// errClosedWhileResuming ends the engines of a connection closed while it
// resumed: nothing more goes out on either queue pair.
var errClosedWhileResuming = errors.New("rnet: closed while the connection resumed")

// resumeRun gives the failed queue pair's device back, asks the Resumer
// for a new path and moves the connection onto it, or fails the
// connection; done is closed when it returns.
func (c *Conn) resumeRun(ctx context.Context, cancel context.CancelFunc, failed QueuePair, req ResumeRequest, done chan struct{}) {
	defer close(done)
	defer cancel()
	if r, ok := failed.(DeviceReleaser); ok {
		// The drain is done and nothing steps the failed queue pair; with
		// the wait taken, nobody waits in it either. Its pinned memory
		// and device objects go before the new path's are made. What
		// this could not free, Destroy tries again.
		c.takeWait()
		r.ReleaseDevice()
		c.handOffWait()
	}
	// A deadline or cancel must reach the wait of switchTo.
	stop := context.AfterFunc(ctx, c.kick)
	defer stop()
	var lastPathErr error
	for {
		req.NewPathErr = lastPathErr
		qp, eng, err := c.set.Resumer.Resume(ctx, req)
		if err != nil {
			if lastPathErr != nil {
				err = fmt.Errorf("%w (the last new path failed: %w)", err, lastPathErr)
			}
			c.giveUp(err)
			return
		}
		// A new path that fails before it takes over is not the end:
		// the Resumer tries again within what is left of ctx.
		if lastPathErr = c.switchTo(ctx, qp, eng); lastPathErr == nil {
			return
		}
	}
}

// giveUp fails a connection whose resume failed with err, unless Close
// has ended its resumes (it then releases everything itself).
func (c *Conn) giveUp(err error) {
	c.mu.Lock()
	if c.resumeAbandoned {
		c.mu.Unlock()
		return
	}
	rerr := c.failResumeLocked(err)
	c.mu.Unlock()
	c.reportResumeFailed(rerr)
}

// failResumeLocked fails the connection with the resume's failure err,
// and returns the error it fails with.
func (c *Conn) failResumeLocked(err error) *ResumeError {
	took := time.Since(c.resumeStart)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("gave up after ResumeTimeout (%v): %w", took.Round(time.Millisecond), err)
	}
	c.path = pathUp
	c.resumeFailed = true
	c.heldWrites = nil
	c.resumeStats.Failed++
	rerr := &ResumeError{Cause: c.resumeCause, Err: err, Took: took}
	c.failLocked(rerr)
	c.wakeAllLocked()
	return rerr
}

// reportResumeFailed tells the Resumer and Settings.ResumeFailed that the
// resume gave up with err; mu must not be held.
func (c *Conn) reportResumeFailed(err *ResumeError) {
	c.forget()
	if f := c.set.ResumeFailed; f != nil {
		f(c, err)
	}
}

// wakeAllLocked wakes every call parked on its channel: the path changed.
func (c *Conn) wakeAllLocked() {
	c.signalLocked()
	notify(c.readable)
	notify(c.writable)
	notify(c.changed)
	c.kickLocked()
}

// switchTo moves the connection onto qp and its fresh engine eng, drives
// them until the exchange is done, and takes the stream over from the old
// engine; or fails the connection if that fails. If the new path fails
// before that, as a path does, the connection waits for a path again and
// switchTo returns why (retry).
func (c *Conn) switchTo(ctx context.Context, qp QueuePair, eng *ring.Engine) (retry error) {
	// Owning the wait, this goroutine knows nobody waits on the old queue
	// pair, and it is the one that waits on the new.
	c.takeWait()
	c.mu.Lock()
	if c.resumeAbandoned {
		c.mu.Unlock()
		c.handOffWait()
		qp.Shutdown()
		qp.Destroy()
		return nil
	}
	old := c.qp
	c.oldEng = c.eng
	c.qp, c.eng = qp, eng
	c.kickTo.Store(&qp)
	c.pathNum++
	path := c.pathNum
	c.path = pathSwitching
	c.armed = false
	c.sendsNeeded = false
	// The old queue pair's Destroy releases the regions its engine
	// retired while loans ran.
	clear(c.lentRegions)
	c.lentRegions = c.lentRegions[:0]
	c.mu.Unlock()
	qp.Start(pathEvents{c: c, path: path})
	old.Shutdown()
	bound := c.boundExchange(ctx)
	if bound.wait > 0 {
		// The loop below sees the bound pass: the timer wakes its wait.
		defer time.AfterFunc(bound.wait, c.kick).Stop()
	}

	// done also sees the bound pass, after whichever step polled the
	// completion it waited for.
	done := func() bool {
		bound.checkLocked(c)
		return c.eng.ResumeReady() || c.fatal != nil || c.eng.Err() != nil || c.resumeAbandoned || ctx.Err() != nil || c.newPathErr != nil
	}
	for {
		c.mu.Lock()
		c.driveLocked()
		ok := done()
		c.mu.Unlock()
		if ok {
			break
		}
		c.awaitEvent(done)
	}

	c.mu.Lock()
	oldEng := c.oldEng
	var err error
	pathFailed := false // the new path failed as a path does, before the take-over
	// The new path's disconnect that came once both exchanges were done
	// is the new path's, not the switch's: the switch takes over, and the
	// disconnect is delivered again to the path now in use (what arrived
	// before it, such as the peer's DISCONNECT, counts).
	if c.newPathDisconnected {
		// The peer's queue pair sends nothing more: everything it sent
		// is in our completion queue, to be polled now.
		c.qp.CollectAll()
		c.driveLocked()
	}
	exchanged := c.eng.ResumeReady() && c.eng.Err() == nil && c.fatal == nil
	var late bool
	switch {
	case c.resumeAbandoned:
	case c.newPathErr != nil && !(c.newPathDisconnected && exchanged):
		err, pathFailed = c.newPathErr, true
	case c.fatal != nil:
		err = c.fatal
	case c.eng.Err() != nil:
		err = c.eng.Err()
		pathFailed = isPathFailure(err)
	case !c.eng.ResumeReady():
		err = fmt.Errorf("%w: the new path's exchange did not finish: %s", ctx.Err(), c.eng.ResumeProgress())
	default:
		late = c.newPathErr != nil
		err = c.takeOverLocked(oldEng)
		if err == nil {
			err = c.moveHeldWritesLocked()
		}
	}
	if pathFailed && ctx.Err() == nil {
		c.backToSuspended(old, oldEng)
		return err
	}
	abandoned := c.resumeAbandoned
	resumed := !abandoned && err == nil
	var failed *ResumeError
	kind, took, resent := c.resumeKind, time.Since(c.resumeStart), c.resumeStats.BytesResent
	switch {
	case resumed:
		c.path = pathUp
		c.resumeStats.Resumes[kind]++
		c.resumeStats.LastTook = took
		c.resumeStats.TotalTook += took
		c.keepaliveStalls = 0
		c.keepaliveQuietSince = keepaliveNow()
		c.keepaliveSendsDone = c.eng.Stats().SendCompletions
		c.driveLocked() // what the peer lacks goes again
		c.wakeAllLocked()
	case !abandoned:
		failed = c.failResumeLocked(err)
	}
	c.oldEng = nil
	c.newPathErr, c.newPathDisconnected = nil, false
	// A loan of the old engine's ring memory keeps it mapped.
	destroyOld := c.lends == 0
	if !destroyOld {
		c.retiredQPs = append(c.retiredQPs, old)
	}
	c.mu.Unlock()
	c.handOffWait()
	if destroyOld {
		old.Destroy()
	}
	switch {
	case resumed:
		if f := c.set.Resumed; f != nil {
			f(c, kind, took, resent)
		}
		if late {
			c.transportDisconnected(path)
		}
	case !abandoned:
		c.reportResumeFailed(failed)
	}
	return nil
}

// backToSuspended undoes a switch whose new path failed before it
// took over: the connection waits for a path again on the old queue pair
// and engine, with what Writes left meanwhile, and the new queue pair is
// disconnected (its peer hears of it and resumes again too) and released.
// Called with mu held, it returns with mu released and the wait handed
// off.
func (c *Conn) backToSuspended(old QueuePair, oldEng *ring.Engine) {
	failed := c.qp
	failed.Disconnect()
	c.qp, c.eng = old, oldEng
	c.kickTo.Store(&old)
	c.oldEng = nil
	c.newPathErr, c.newPathDisconnected = nil, false
	c.path = pathSuspended
	// A loan of the new engine's ring memory keeps it mapped.
	destroy := c.lends == 0
	if !destroy {
		c.retiredQPs = append(c.retiredQPs, failed)
	}
	c.signalLocked()
	c.mu.Unlock()
	c.handOffWait()
	failed.Shutdown()
	if destroy {
		failed.Destroy()
	}
}

// exchangeBound is when a switch's new path counts as failed for want of
// the peer's exchange (ExchangeWaiter).
type exchangeBound struct {
	wait time.Duration // 0: no bound
	at   time.Time
}

// boundExchange returns the Resumer's bound on the switch's wait for the
// peer's exchange, which begins now.
func (c *Conn) boundExchange(ctx context.Context) exchangeBound {
	w, ok := c.set.Resumer.(ExchangeWaiter)
	deadline, hasDeadline := ctx.Deadline()
	if !ok || !hasDeadline {
		return exchangeBound{}
	}
	wait := w.ExchangeWait(time.Until(deadline))
	if wait <= 0 {
		return exchangeBound{}
	}
	return exchangeBound{wait: wait, at: time.Now().Add(wait)}
}

// checkLocked fails the new path, as a path fails, once the bound has
// passed with this side's exchange acknowledged and the peer's not come:
// the peer's queue pair took ours, so the wire works, and the peer is
// waiting for something else (the RTU). An exchange not yet acknowledged
// says the wire is slow or losing frames, which a new request over it
// would not mend, so the path keeps its chance until that changes.
func (b exchangeBound) checkLocked(c *Conn) {
	if b.wait <= 0 || c.newPathErr != nil || !c.eng.ExchangeAwaitsPeer() || time.Now().Before(b.at) {
		return
	}
	c.newPathErr = fmt.Errorf("%w: waited %v (%s)", ErrExchangeLate, b.wait, c.eng.ResumeProgress())
}

// newPathFailedLocked ends the switch under way with err, a transport
// event of the new path: the switch fails (or tries another path) with a
// ResumeError rather than take the event for the connection's own.
func (c *Conn) newPathFailedLocked(err error) {
	if c.newPathErr == nil {
		c.newPathErr = err
	}
	c.kickLocked()
}

// takeOverLocked checks the peer's exchange against what old holds and
// takes the stream over from it.
func (c *Conn) takeOverLocked(old *ring.Engine) error {
	msg, _ := c.eng.PeerExchange()
	ex, err := resume.ParseExchange(msg[:])
	if err != nil {
		return err
	}
	held, err := resume.HeldBy(old)
	if err != nil {
		return err
	}
	plan, err := held.Resend(ex)
	if err != nil {
		return err
	}
	if err := c.eng.TakeOver(old, plan.From, plan.Shutdown); err != nil {
		return err
	}
	c.resumeStats.BytesResent += held.Sent - plan.From
	return nil
}

// kick makes the current or next wait on the connection's queue pair
// return, whichever queue pair that is now.
func (c *Conn) kick() { (*c.kickTo.Load()).Kick() }
