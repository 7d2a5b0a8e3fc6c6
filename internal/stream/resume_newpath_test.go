package stream

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
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
	rc := resumePipe(t, func(s *Settings) { s.MaxResumes = 2 })
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
}
