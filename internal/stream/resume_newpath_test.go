package stream

import (
	"errors"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// failingStartQP is a new path whose transport reports it failed as soon
// as the connection listens for its events, while the switch to it runs.
type failingStartQP struct {
	QueuePair
	err error
}

func (q failingStartQP) Start(h EventHandler) {
	q.QueuePair.Start(h)
	h.TransportFailed(q.err)
}

// A transport event of the new path while the connection switches to it
// ends the switch with a ResumeError that wraps it: it is neither dropped
// (the switch waiting out ResumeTimeout) nor the connection's plain error.
func TestResumeNewPathEventWhileSwitching(t *testing.T) {
	rc := resumePipe(t, func(s *Settings) { s.ResumeTimeout = 300 * time.Millisecond })
	defer rc.close()
	removed := errors.New("test: the new path's device was removed")
	rc.ra.wrapNew = func(q QueuePair) QueuePair { return failingStartQP{q, removed} }
	failIdle(rc.a)
	rc.a.SetReadDeadline(time.Now().Add(conntest.Timeout(t)))
	_, err := rc.a.Read(make([]byte, 10))
	var re *ResumeError
	if !errors.As(err, &re) || !errors.Is(err, removed) {
		t.Fatalf("Read = %v, want a ResumeError for the new path's event", err)
	}
}

// A connection resumes at most MaxResumes times within 4 × ResumeTimeout
// (a peer's valid resume requests must not keep it resuming for ever):
// the next failure of its path fails it with a ResumeError that says the
// limit was reached, and the resumer forgets it.
func TestResumeLimit(t *testing.T) {
	type failure struct {
		c   *Conn
		err *ResumeError
	}
	heard := make(chan failure, 4)
	rc := resumePipe(t, func(s *Settings) {
		s.MaxResumes = 2
		s.ResumeFailed = func(c *Conn, err *ResumeError) { heard <- failure{c, err} }
	})
	defer rc.close()
	for i := 1; i <= 2; i++ {
		rc.a.PathFailed(errors.New("test: the peer asks to resume"))
		conntest.Until(t, "both ends resumed", func() bool {
			return resumesOf(rc.a) == uint64(i) && resumesOf(rc.b) == uint64(i)
		})
	}
	rc.a.PathFailed(errors.New("test: the peer asks to resume once more"))
	_, err := rc.a.Write([]byte("x"))
	var re *ResumeError
	if !errors.As(err, &re) || !errors.Is(err, ErrResumeLimit) || !strings.Contains(err.Error(), "MaxResumes") {
		t.Fatalf("Write past the limit = %v, want a ResumeError for the limit", err)
	}
	if n := rc.ra.calls.Load(); n != 2 {
		t.Fatalf("Resume called %d times, want 2", n)
	}
	conntest.Until(t, "Forget", func() bool { return rc.ra.forgets.Load() == 1 })
	// The limit's failure is a resume that failed, for the metrics too
	// (the peer's end fails as well, in its own way).
	for {
		select {
		case f := <-heard:
			if f.c != rc.a {
				continue
			}
			if f.err != re {
				t.Errorf("ResumeFailed heard %v, want the error Write returned", f.err)
			}
			return
		case <-time.After(conntest.Bound):
			t.Fatal("ResumeFailed did not hear of the resume the limit refused")
		}
	}
}

// A new path that fails before it takes over (its transport reports it
// failed during the exchange) is not the end of the resume: both ends
// wait for a path again and resume on the next one, within ResumeTimeout.
func TestResumeRetriesAfterNewPathFails(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	removed := errors.New("test: the first new path's device was removed")
	var wrapped atomic.Bool
	rc.ra.wrapNew = func(q QueuePair) QueuePair {
		if wrapped.Swap(true) {
			return q
		}
		return failingStartQP{q, removed}
	}
	errs := streamAcrossANewPathFailure(t, rc, 13)
	if len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], removed) {
		t.Errorf("the dialer's Resume calls were told the new path failed with %v; want nil, then %v", errs, removed)
	}
	if n := resumesOf(rc.a); n != 1 {
		t.Errorf("the dialer resumed %d times, want 1", n)
	}
	// The listener may have taken the first new path over before the
	// dialer's end of it failed: it then resumed again when it did.
	if n := resumesOf(rc.b); n < 1 || n > 2 {
		t.Errorf("the listener resumed %d times, want 1 or 2", n)
	}
}

// A ReadFrom whose reader returns while the path is down waits for a new
// path no longer than its write deadline, as a Write does.
func TestResumeReadFromDeadlineWhileSuspended(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	rc.ra.hold = make(chan struct{}) // no path while the test runs
	pass := make(chan struct{})
	gr := &gatedReader{total: 100 << 10, gate: 20 << 10, salt: 15, at: make(chan struct{}), pass: pass}
	at := gr.at
	go io.Copy(io.Discard, rc.b) // until Close
	sent := make(chan error, 1)
	go func() {
		_, err := rc.a.ReadFrom(gr)
		sent <- err
	}()
	select {
	case <-at:
	case <-time.After(conntest.Timeout(t)):
		t.Fatal("the loan never reached its gate")
	}
	failIdle(rc.a)
	rc.ra.waitEntered(t)
	rc.a.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	close(pass)
	select {
	case err := <-sent:
		errorIs(t, "ReadFrom past its write deadline while suspended", err, os.ErrDeadlineExceeded)
	case <-time.After(conntest.Timeout(t)):
		t.Fatal("ReadFrom waits for a path past its write deadline")
	}
}

// failingPathQP is a new path whose completions fail, as a broken path's
// do, from the start of the switch to it.
type failingPathQP struct{ *simqp.QP }

func (q failingPathQP) Start(h EventHandler) {
	q.QP.Start(h)
	q.Endpoint().Fail(wr.WCRetryExcErr)
}

// A new path whose engine fails during the exchange is tried again too,
// and the failed engine's error never reaches the Reads and Writes that
// run meanwhile: they go on once the next path takes over.
func TestResumeRetriesAfterNewEngineFails(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	var wrapped atomic.Bool
	rc.ra.wrapNew = func(q QueuePair) QueuePair {
		if wrapped.Swap(true) {
			return q
		}
		return failingPathQP{q.(*simqp.QP)}
	}
	errs := streamAcrossANewPathFailure(t, rc, 16)
	if len(errs) != 2 || errs[0] != nil || errs[1] == nil {
		t.Errorf("the dialer's Resume calls were told the new path failed with %v; want nil, then the new engine's error", errs)
	}
	if n := resumesOf(rc.a); n != 1 {
		t.Errorf("the dialer resumed %d times, want 1", n)
	}
}

// A new path whose peer stays silent (a listener still waiting for an RTU
// that was lost) counts as failed once the dialer's ExchangeWait has
// passed: the dialer asks for another path at once, well within
// ResumeTimeout, and the stream goes on there with every byte once.
func TestResumeRetriesWhenTheExchangeIsLate(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	rc.ra.exchangeWait = 50 * time.Millisecond
	rc.rb.silentFirst.Store(true)
	errs := streamAcrossANewPathFailure(t, rc, 18)
	if len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], ErrExchangeLate) {
		t.Errorf("the dialer's Resume calls were told the new path failed with %v; want nil, then %v", errs, ErrExchangeLate)
	}
	if n := rc.rb.calls.Load(); n != 1 {
		t.Errorf("the listener's Resume called %d times, want 1 (its silent path never took over)", n)
	}
	if a, b := resumesOf(rc.a), resumesOf(rc.b); a != 1 || b != 1 {
		t.Errorf("resumes: dialer %d, listener %d; want 1 each", a, b)
	}
}

// streamAcrossANewPathFailure streams checked bytes each way across a
// failure of the dialer's path, whose first new path fails (as the caller
// arranged), and returns what the dialer's Resume calls, two of them, were
// told of the new path.
func streamAcrossANewPathFailure(t *testing.T, rc *resumeConns, salt uint64) []error {
	t.Helper()
	const total = 100 << 10
	ab := startChecked(rc.a, rc.b, total, salt, total/2)
	ba := startChecked(rc.b, rc.a, total, salt+1, total/2)
	gate(t, ab, ba)
	failIdle(rc.a)
	pass(ab, ba)
	ab.wait(t)
	ba.wait(t)
	if n := rc.ra.calls.Load(); n != 2 {
		t.Errorf("the dialer's Resume called %d times, want 2", n)
	}
	rc.ra.newPathErrsMu.Lock()
	defer rc.ra.newPathErrsMu.Unlock()
	return append([]error(nil), rc.ra.newPathErrs...)
}
