package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Resuming a connection whose queue pair failed on a new one, to the same
// peer (docs/design.md, "Resuming a connection on another path").
//
// A failure of the path (not of the peer's protocol, nor a close) moves the
// connection from pathUp to pathSuspended: the old queue pair goes to the
// error state and is drained, so that the counts of the old engine are
// final, and a goroutine of the connection's (resumeRun) asks the
// Resumer for a new queue pair and engine. Meanwhile Reads return the bytes
// already received and then wait, Writes wait, and nothing steps the old
// queue pair. Once the resumer answers, the connection is pathSwitching:
// the new queue pair and engine are the connection's, and resumeRun owns
// the completion wait until the exchange is done and the new engine has
// taken the stream over; then the connection is pathUp again.

// ResumeRequest is what a Conn gives its Resumer when its path has failed.
type ResumeRequest struct {
	// Own is this side's exchange: the fresh engine's BeginResume(Own), before Establish.
	Own [ring.ExchangeSize]byte
	// Ring configures the fresh engine: the old engine's, with IdleBufferSize at least
	// its send ring, since TakeOver copies the held bytes.
	Ring ring.Config
	// Cause is why the old path failed.
	Cause error
	// NewPathErr, when Resume is called again within one resume, is why
	// the new path the last call returned failed before it took over.
	NewPathErr error
}

// Resumer moves a connection whose queue pair failed onto a new one, to the same
// peer (the resume extension, docs/design.md). Package rnet makes one per agreed
// connection: the dialer's connects again, the listener's waits for the dialer.
type Resumer interface {
	// Resume returns a new queue pair to the peer and its fresh engine, established,
	// on which BeginResume(req.Own) was called before Establish; or an error once no
	// path is left or ctx is done (ctx carries Settings.ResumeTimeout). It runs on a
	// goroutine of its own, without the Conn's locks, once per failure.
	Resume(ctx context.Context, req ResumeRequest) (QueuePair, *ring.Engine, error)
	// Forget says the connection has ended for good (closed, failed, or its peer
	// disconnected): the resumer releases what it holds (the listener's token).
	Forget()
}

// ExchangeWaiter is a Resumer that bounds how long a new path waits for
// the peer's exchange: past that the path counts as failed (ErrExchangeLate)
// and Resume is called again. The dialer's is one: a lost RTU leaves the
// listener waiting for it, silent, until its connection manager resends
// the reply some 4 s later, while a new request replaces that handshake at
// once.
type ExchangeWaiter interface {
	// ExchangeWait is the bound for a new path established with left of
	// the resume's time to go; 0 waits for all of it.
	ExchangeWait(left time.Duration) time.Duration
}

// ErrExchangeLate is the NewPathErr of a new path whose peer's exchange
// did not come within its ExchangeWaiter's bound.
var ErrExchangeLate = errors.New("the peer's exchange did not come in time on the new path")

// DefaultResumeTimeout bounds a resume when Settings.ResumeTimeout is not
// positive: a dialer's few attempts, well within the listener's token
// lifetime (resume.DefaultLifetime).
const DefaultResumeTimeout = 5 * time.Second

// DefaultMaxResumes is Settings.MaxResumes when not positive.
const DefaultMaxResumes = 4

// ErrResumeLimit is what a ResumeError wraps when a path failed once
// Settings.MaxResumes resumes had started within their window.
var ErrResumeLimit = errors.New("the limit of resumes within their window was reached")

// ResumeCause says how a connection learned that its path failed.
type ResumeCause uint8

const (
	// CauseCompletion: a work completion failed as a path does (retries
	// exceeded, a flush, completions lost with the device).
	CauseCompletion ResumeCause = iota
	// CauseTransport: the connection manager reported the path gone (a
	// device removed, a disconnect without the peer's DISCONNECT).
	CauseTransport
	// CauseKeepalive: keepalives went unacknowledged.
	CauseKeepalive
	// CausePeerRequest: the peer asked to resume (PathFailed).
	CausePeerRequest
	numResumeCauses
)

// String names the cause as logs and metrics do.
func (k ResumeCause) String() string {
	switch k {
	case CauseCompletion:
		return "completion error"
	case CauseTransport:
		return "transport event"
	case CauseKeepalive:
		return "keepalive"
	case CausePeerRequest:
		return "peer's request"
	}
	return "unknown"
}

// pathState is where a connection stands with its path; under mu.
type pathState uint8

const (
	pathUp        pathState = iota // the queue pair carries the stream
	pathDraining                   // the failed queue pair is being drained
	pathSuspended                  // the Resumer looks for a new one
	pathSwitching                  // the new one is in, its exchange under way
)

// waitsForPathLocked reports that the stream waits for a new path: the
// failed engine's error is not the connection's.
func (c *Conn) waitsForPathLocked() bool {
	return c.path == pathDraining || c.path == pathSuspended
}

// pathDownLocked reports that the stream waits for a new path or for the
// switch to one: neither engine's error is the connection's (a new path
// that fails is tried again), and Writes are held.
func (c *Conn) pathDownLocked() bool { return c.path != pathUp }

// failedLocked reports that the connection has failed for good (a resume
// that runs is not a failure).
func (c *Conn) failedLocked() bool {
	return c.fatal != nil || !c.pathDownLocked() && c.eng.Err() != nil
}

// PathFailed says the connection's path failed although it may still look
// healthy (a valid resume request came from the peer): the connection
// moves its queue pair to the error state and resumes, as for any other
// failure of its path. Without a Resumer, or once the connection is over,
// it does nothing.
func (c *Conn) PathFailed(cause error) {
	c.mu.Lock()
	if cause == nil {
		cause = errors.New("the peer asked to resume the connection")
	}
	if c.resumableLocked(nil) {
		c.suspendLocked(CausePeerRequest, cause)
	}
	c.mu.Unlock()
}

// resumableLocked reports whether a failure with err (nil: not the
// engine's) would resume: a Resumer is set, the path is up, nothing local
// ended the connection (Close past its wait for the bytes written, a fatal
// error), the peer sent no
// DISCONNECT, the stream is not over, and err, if any, is the path's.
func (c *Conn) resumableLocked(err error) bool {
	if c.set.Resumer == nil || c.path != pathUp || c.resumeAbandoned || c.fatal != nil || c.resumeFailed {
		return false
	}
	return c.streamResumableLocked(err)
}

// streamResumableLocked is the engine's part of resumableLocked: the peer
// sent no DISCONNECT, the stream is not over, and err (nil: the engine's)
// is nil or the path's.
func (c *Conn) streamResumableLocked(err error) bool {
	if c.eng.PeerDisconnected() || c.eng.Finished() && c.eng.Err() == nil {
		return false
	}
	if err == nil {
		err = c.eng.Err()
	}
	return err == nil || isPathFailure(err)
}

// isPathFailure reports whether an engine's error says the path failed, not
// the peer's protocol: completions flushed or failed as a broken path
// fails them, or lost with the device; or a post refused by a queue pair
// that is gone.
func isPathFailure(err error) bool {
	if errors.Is(err, ring.ErrProtocol) {
		return false
	}
	if errors.Is(err, ring.ErrCompletionsLost) || errors.Is(err, ErrQueuePairGone) {
		return true
	}
	var ce *ring.CompletionError
	if !errors.As(err, &ce) {
		return false
	}
	switch ce.Status {
	case wr.WCWRFlushErr, wr.WCRetryExcErr, wr.WCRespTimeoutErr, wr.WCFatalErr, wr.WCGeneralErr:
		return true
	}
	return false
}

// checkPathLocked, after a step, starts a resume if the step found the path
// failed. A connection that the engine's error (a peer's protocol error, a
// failed completion) ended for good takes its queue pair down and tells
// the peer, as failLocked does, and the Resumer forgets it.
func (c *Conn) checkPathLocked() {
	if c.path != pathUp {
		return
	}
	err := c.eng.Err()
	if err == nil && c.fatal == nil && !c.eng.PeerDisconnected() {
		return
	}
	if err != nil && c.resumableLocked(err) {
		c.suspendLocked(CauseCompletion, err)
		return
	}
	if err != nil {
		c.qp.Disconnect() // once: later calls do nothing
	}
	c.forgetLater()
}

// suspendLocked takes the failed path down and starts resuming: the old
// queue pair goes to the error state and is drained, so that the engine's
// counts are final, and resumeRun asks the Resumer for a new one.
func (c *Conn) suspendLocked(kind ResumeCause, cause error) {
	c.path = pathDraining // the drain's flushes start no resume of their own
	c.qp.Disconnect()
	// What arrived before the failure counts, and may end the stream
	// (the peer's DISCONNECT, a protocol error): decide again after it.
	c.drainLocked()
	if c.fatal == nil && !c.streamResumableLocked(nil) {
		c.path = pathUp
		c.forgetLater()
		c.signalLocked()
		c.kickLocked()
		return
	}
	c.eng.Fail(cause) // the old engine posts nothing more
	c.suspendDrainedLocked(kind, cause)
}

// suspendDrainedLocked is suspendLocked once the old queue pair is in the
// error state and drained.
func (c *Conn) suspendDrainedLocked(kind ResumeCause, cause error) {
	if c.fatal != nil {
		// The drain failed the connection: it does not resume.
		c.path = pathUp
		c.forgetLater()
		c.signalLocked()
		c.kickLocked()
		return
	}
	timeout := c.set.ResumeTimeout
	if timeout <= 0 {
		timeout = DefaultResumeTimeout
	}
	if err := c.resumeLimitLocked(4 * timeout); err != nil {
		c.path = pathUp
		c.resumeFailed = true
		c.resumeStats.Failed++
		rerr := &ResumeError{Cause: cause, Err: err}
		c.failLocked(rerr)
		c.wakeAllLocked()
		if f := c.set.ResumeFailed; f != nil {
			go f(c, rerr) // the caller holds mu
		}
		return
	}
	c.path = pathSuspended
	// Completions that come after the drain are not counted: what they
	// would say was received the peer sends again.
	c.eng.QueuePairDestroyed()
	c.heldWrites, c.heldRoom = c.heldWrites[:0], c.eng.SendSpace()
	counts := c.eng.StreamCounts()
	cfg := c.eng.Config()
	send, _ := c.eng.RingSizes()
	cfg.IdleBufferSize = max(cfg.IdleBufferSize, send)
	req := ResumeRequest{
		Own:   resume.Exchange{Received: counts.Received, EOF: counts.PeerShutDown}.Encode(),
		Ring:  cfg,
		Cause: cause,
	}
	// The deadline counts from resumeStart, which the error's time is
	// measured from: one that gave up says it had its whole timeout.
	c.resumeStart = time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), c.resumeStart.Add(timeout))
	c.resumeCancel = cancel
	c.resumeDone = make(chan struct{})
	c.resumeKind = kind
	c.resumeCause = cause
	go c.resumeRun(ctx, cancel, c.qp, req, c.resumeDone)
	c.signalLocked()
	c.kickLocked()
}

// resumeLimitLocked counts a resume about to start against
// Settings.MaxResumes within window, or says why it may not start.
func (c *Conn) resumeLimitLocked(window time.Duration) error {
	limit := c.set.MaxResumes
	if limit <= 0 {
		limit = DefaultMaxResumes
	}
	now := time.Now()
	recent := c.resumeStarts[:0]
	for _, t := range c.resumeStarts {
		if now.Sub(t) < window {
			recent = append(recent, t)
		}
	}
	c.resumeStarts = recent
	if len(recent) >= limit {
		return fmt.Errorf("%w: %d resumes within %v (MaxResumes)", ErrResumeLimit, len(recent), window)
	}
	c.resumeStarts = append(c.resumeStarts, now)
	return nil
}

// forgetLater tells the Resumer, on a goroutine of its own (the caller
// holds mu), that the connection has ended for good.
func (c *Conn) forgetLater() {
	if c.set.Resumer != nil && !c.forgetting {
		c.forgetting = true
		go c.forget()
	}
}

// forget tells the Resumer, once, that the connection has ended for good;
// mu must not be held.
func (c *Conn) forget() {
	if r := c.set.Resumer; r != nil {
		c.forgetOnce.Do(r.Forget)
	}
}

// pathEvents delivers one queue pair's events to its Conn: those of a
// path the connection has left are ignored.
type pathEvents struct {
	c    *Conn
	path uint64
}

func (h pathEvents) TransportDisconnected() { h.c.transportDisconnected(h.path) }
func (h pathEvents) TransportFailed(err error) {
	h.c.transportFailed(h.path, err)
}

// ResumeStats are a connection's resumes, in its Snapshot.
type ResumeStats struct {
	// Resumes counts the resumes that completed, by ResumeCause.
	Resumes [numResumeCauses]uint64
	// Failed counts the resumes that gave up.
	Failed uint64
	// LastTook and TotalTook are how long the last resume took, and all
	// of them, from the failure to the stream moving again.
	LastTook, TotalTook time.Duration
	// BytesResent counts the bytes sent again after a resume.
	BytesResent uint64
}

// holdWriteLocked takes what the send ring had room for of b while the
// path is down; the engine that takes over sends it after the held bytes
// (moveHeldWritesLocked).
func (c *Conn) holdWriteLocked(b []byte) (int, error) {
	if c.writeShut {
		return 0, ring.ErrWriteClosed
	}
	n := min(len(b), c.heldRoom-len(c.heldWrites))
	c.heldWrites = append(c.heldWrites, b[:n]...)
	return n, nil
}

// moveHeldWritesLocked writes what Writes left while the path was down
// into the engine that took over, then queues a CloseWrite made meanwhile.
// Its send ring holds them: it is at least as large as the old one, and
// holds no more of the old one's bytes.
func (c *Conn) moveHeldWritesLocked() error {
	if len(c.heldWrites) > 0 {
		n, err := c.eng.Write(c.heldWrites)
		if err != nil {
			return err
		}
		if n < len(c.heldWrites) {
			return fmt.Errorf("rnet: the resumed send ring took %d of the %d bytes written while the path was down", n, len(c.heldWrites))
		}
		c.wroteSinceRead = true
	}
	c.heldWrites = nil
	if c.closeWriteLater {
		c.closeWriteLater = false
		c.eng.CloseWrite()
	}
	return nil
}
