package stream

import (
	"sync/atomic"
	"testing"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// releasingQP is a simulated queue pair that can give its device back
// (DeviceReleaser): once it has, nothing may step it or add a region to it.
type releasingQP struct {
	*simqp.QP
	t         testing.TB
	released  atomic.Int32
	destroyed atomic.Bool
}

func (q *releasingQP) ReleaseDevice() error {
	q.released.Add(1)
	return nil
}

func (q *releasingQP) Step(flags wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	if q.released.Load() > 0 {
		q.t.Errorf("Step on a queue pair whose device was given back")
	}
	return q.QP.Step(flags, recvs, sends, out, tries)
}

func (q *releasingQP) AddRegion(kind ring.RegionKind, size int) (ring.Region, error) {
	if q.released.Load() > 0 {
		q.t.Errorf("AddRegion on a queue pair whose device was given back")
	}
	return q.QP.AddRegion(kind, size)
}

func (q *releasingQP) Destroy() error {
	q.destroyed.Store(true)
	return q.QP.Destroy()
}

// A connection whose path failed gives the failed queue pair's device back
// before it asks for a new path, once, and steps it no more; the queue pair
// is destroyed once the new path has taken over, and the stream goes on with
// every byte.
func TestResumeReleasesTheFailedDevice(t *testing.T) {
	var rq *releasingQP
	rc := resumePipeWrap(t, nil, func(q *simqp.QP) QueuePair {
		rq = &releasingQP{QP: q, t: t}
		return rq
	})
	defer rc.close()
	rc.ra.hold = make(chan struct{}) // the dialer's resume waits for the check
	const total = 200 << 10
	ab := startChecked(rc.a, rc.b, total, 1, total/3)
	ba := startChecked(rc.b, rc.a, total, 2, total/3)
	gate(t, ab, ba)
	rq.QP.Endpoint().Fail(wr.WCRetryExcErr)
	rc.a.Drive() // as the tick would
	rc.ra.waitEntered(t)
	if n := rq.released.Load(); n != 1 {
		t.Fatalf("the failed queue pair's device was given back %d times before the resume asked for a path, want once", n)
	}
	if rq.destroyed.Load() {
		t.Fatal("the failed queue pair was destroyed before the resume")
	}
	close(rc.ra.hold)
	pass(ab, ba)
	ab.wait(t)
	ba.wait(t)
	conntest.Until(t, "the failed queue pair destroyed", rq.destroyed.Load)
	if n := rq.released.Load(); n != 1 {
		t.Errorf("the device was given back %d times, want once", n)
	}
	if n := resumesOf(rc.a); n != 1 {
		t.Errorf("the dialer resumed %d times, want 1", n)
	}
}
