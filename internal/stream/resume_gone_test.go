package stream

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// refusingQP is a queue pair whose steps fail with refusal once it is set,
// as a post does on a removed device (ErrQueuePairGone) or for a bad work
// request.
type refusingQP struct {
	*simqp.QP
	refusal atomic.Pointer[error]
}

func (q *refusingQP) Step(flags wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	if err := q.refusal.Load(); err != nil {
		return 0, *err
	}
	return q.QP.Step(flags, recvs, sends, out, tries)
}

// refusingPipe is resumePipe with the dialer's queue pair a refusingQP.
func refusingPipe(t *testing.T) (*resumeConns, *refusingQP) {
	var q *refusingQP
	rc := resumePipeWrap(t, nil, func(sq *simqp.QP) QueuePair {
		q = &refusingQP{QP: sq}
		return q
	})
	return rc, q
}

// A post that the queue pair refuses because it is gone fails the path,
// not the connection: both ends resume and the stream goes on.
func TestResumeAfterPostRefusedQueuePairGone(t *testing.T) {
	rc, q := refusingPipe(t)
	defer rc.close()
	gone := fmt.Errorf("%w: ibv_post_send rxe0: input/output error", ErrQueuePairGone)
	q.refusal.Store(&gone)
	if _, err := rc.a.Write([]byte("after the removal")); err != nil {
		t.Fatalf("Write on a queue pair that is gone: %v", err)
	}
	buf := make([]byte, 64)
	rc.b.SetReadDeadline(time.Now().Add(conntest.Timeout(t)))
	n, err := rc.b.Read(buf)
	if err != nil || string(buf[:n]) != "after the removal" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	if s := rc.a.Stats().Resume; s.Resumes[CauseCompletion] != 1 {
		t.Fatalf("resumes: %v, want one for the refused post", s.Resumes)
	}
}

// A post refused for another reason (a bad work request: a local bug)
// still fails the connection, and nothing resumes.
func TestResumeNotAfterPostRefusedOtherwise(t *testing.T) {
	rc, q := refusingPipe(t)
	defer rc.close()
	bad := errors.New("ibv_post_send rxe0: invalid argument")
	q.refusal.Store(&bad)
	var err error
	for err == nil {
		_, err = rc.a.Write([]byte("x"))
	}
	errorIs(t, "Write on a queue pair that refuses a bad post", err, bad)
	conntest.Until(t, "Forget", func() bool { return rc.ra.forgets.Load() == 1 })
	if n := rc.ra.calls.Load(); n != 0 {
		t.Fatalf("Resume called %d times after a bad post", n)
	}
}

// deafQP is a queue pair whose transport events never reach the Conn, so
// that a test decides when the connection hears of its path.
type deafQP struct{ *simqp.QP }

func (q deafQP) Start(EventHandler) { q.QP.Start(deafHandler{}) }

type deafHandler struct{}

func (deafHandler) TransportDisconnected() {}
func (deafHandler) TransportFailed(error)  {}

// A path failure whose drain finds the peer's DISCONNECT (it came before
// the failure, unpolled) ends the connection as the DISCONNECT does:
// nothing resumes, and the reader gets the last bytes, then io.EOF.
func TestResumeNotWhenDrainFindsDisconnect(t *testing.T) {
	rc := resumePipeWrap(t, nil, func(q *simqp.QP) QueuePair { return deafQP{q} })
	defer rc.close()
	if _, err := rc.b.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	rc.b.Close()
	rc.a.PathFailed(errors.New("test: the peer asked to resume"))
	rc.a.SetReadDeadline(time.Now().Add(conntest.Timeout(t)))
	got, err := io.ReadAll(rc.a)
	if err != nil || string(got) != "bye" {
		t.Fatalf("ReadAll = %q, %v; want the last bytes and io.EOF", got, err)
	}
	if n := rc.ra.calls.Load(); n != 0 {
		t.Fatalf("Resume called %d times after the peer's DISCONNECT", n)
	}
	conntest.Until(t, "Forget", func() bool { return rc.ra.forgets.Load() == 1 })
}

// WithQueuePair runs its function under the connection's lock, so that a
// resume cannot replace and destroy the queue pair meanwhile, on the queue
// pair the connection runs over after a resume too; after Close it does
// not run it, and fails with net.ErrClosed.
func TestWithQueuePair(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	first := rc.a.QueuePair()
	failIdle(rc.a)
	conntest.Until(t, "both ends resumed", func() bool { return resumesOf(rc.a) == 1 && resumesOf(rc.b) == 1 })
	var got QueuePair
	locked := false
	if err := rc.a.WithQueuePair(func(q QueuePair) {
		got = q
		locked = !rc.a.mu.TryLock()
	}); err != nil {
		t.Fatal(err)
	}
	if got == first || got == nil || !locked {
		t.Fatalf("WithQueuePair ran on the first queue pair (%v) or without the lock (locked %v)", got == first, locked)
	}
	rc.a.Close()
	ran := false
	err := rc.a.WithQueuePair(func(QueuePair) { ran = true })
	if ran {
		t.Fatal("WithQueuePair ran after Close")
	}
	errorIs(t, "WithQueuePair after Close", err, net.ErrClosed)
}
