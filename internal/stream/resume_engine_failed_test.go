package stream

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// A Write that meets an engine whose path failed, when no step has started
// the resume yet, starts it and holds the bytes for the new path: it
// neither fails nor loses them.
func TestResumeWriteMeetsFailedEngine(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int // within the send ring's room: Write's own path; past it: writeInParts
	}{{"Fits", 100}, {"InParts", 40 << 10}} {
		t.Run(tc.name, func(t *testing.T) {
			rc := resumePipe(t, nil)
			defer rc.close()
			rc.a.mu.Lock()
			rc.a.eng.Fail(&ring.CompletionError{Status: wr.WCRetryExcErr}) // as a step that did not resume
			rc.a.mu.Unlock()
			done := startChecked(rc.a, rc.b, tc.size, 21)
			done.wait(t)
			if n := resumesOf(rc.a); n != 1 {
				t.Errorf("the writer's end resumed %d times, want 1", n)
			}
		})
	}
}

// While a connection waits for a new path, its Observer hears of no
// vanished peer, though the path's failure says the transport went.
func TestResumeNoPeerGoneWhileWaiting(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close() // while it still waits: no path comes
	rc.ra.hold = make(chan struct{})
	rc.a.mu.Lock()
	path := rc.a.pathNum
	rc.a.mu.Unlock()
	rc.a.transportDisconnected(path) // no DISCONNECT from the peer: its side failed
	rc.ra.waitEntered(t)
	rc.a.mu.Lock()
	gone := rc.a.peerGoneLocked()
	rc.a.mu.Unlock()
	if gone != nil {
		t.Errorf("while resuming, the peer counts as gone: %v", gone)
	}
}
