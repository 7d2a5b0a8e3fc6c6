package stream

import (
	"errors"
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
