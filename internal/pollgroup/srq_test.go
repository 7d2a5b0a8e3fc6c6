package pollgroup

import (
	"errors"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// countingRQ is a shared receive queue that counts what is posted to it.
type countingRQ struct {
	posted    int
	destroyed bool
}

func (r *countingRQ) Post(n int) error { r.posted += n; return nil }
func (r *countingRQ) Destroy() error   { r.destroyed = true; return nil }

// recvCompletions are n successful receive completions of queue pair qp.
func recvCompletions(qp uint32, n int) []wr.Completion {
	wcs := make([]wr.Completion, n)
	for i := range wcs {
		wcs[i] = wr.Completion{ID: ring.RecvIDFlag, QPNum: qp, Opcode: wr.WCRecvRDMAWithImm}
	}
	return wcs
}

// TestPollGroupSharedReceiveQueueAccounts: members claim receives of the
// group's shared queue within what it can hold; a member that leaves
// hands the receives it left on the queue to the next posts; a peer that
// takes a receive beyond its connection's posts gets that connection cut
// off, and the group posts the receive back.
func TestPollGroupSharedReceiveQueueAccounts(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{Auto: true})
	cq := simqp.NewGroupCQ(f.NewCQ(simfabric.CQOptions{Entries: 1024}), ErrInterrupted)
	g := New(cq, nil)
	rq := &countingRQ{}
	if err := g.ShareRecvs(rq, 100); err != nil {
		t.Fatal(err)
	}
	if rq.posted != srqSpare {
		t.Fatalf("a new shared queue holds %d receives, want the %d spare", rq.posted, srqSpare)
	}
	if _, ok := g.Reserve(20, 10, 101); ok {
		t.Fatal("a member claimed more receives than the queue may hold")
	}
	a, ok := g.Reserve(64, 10, 60)
	if !ok {
		t.Fatal("the group refused a member that fits")
	}
	b, ok := g.Reserve(20, 10, 40)
	if !ok {
		t.Fatal("the group refused a member that fits")
	}
	var cut int
	if k := a.ClaimRecvs(5); k != 0 {
		t.Errorf("a full queue gave %d more receives, want 0", k)
	}
	a.Attach(&numQP{num: 1}, func() { cut++ })
	b.Attach(&numQP{num: 2}, nil)

	recvs := make([]wr.Recv, 8)
	if got := a.accountRecvs(recvs); len(got) != 8 {
		t.Fatalf("%d of 8 receives go on the queue, want all", len(got))
	}
	g.pollMu.Lock()
	g.deliverLocked(recvCompletions(1, 8))
	g.pollMu.Unlock()
	if cut != 0 || g.srq.overruns.Load() != 0 {
		t.Fatalf("8 messages for 8 receives: cut off %d times, %d overruns", cut, g.srq.overruns.Load())
	}

	// Messages past a's posted receives borrow up to a headroom's worth
	// of the others'; the group puts each back.
	before := rq.posted
	g.pollMu.Lock()
	g.deliverLocked(recvCompletions(1, ring.RecvHeadroom))
	g.pollMu.Unlock()
	if cut != 0 || rq.posted != before+ring.RecvHeadroom {
		t.Errorf("%d borrowed receives: cut off %d times, %d put back", ring.RecvHeadroom, cut, rq.posted-before)
	}
	// One more is an overrun.
	g.pollMu.Lock()
	g.deliverLocked(recvCompletions(1, 1))
	g.pollMu.Unlock()
	if cut != 1 || rq.posted != before+ring.RecvHeadroom+1 {
		t.Errorf("a message past what it may borrow: cut off %d times (want 1), %d put back (want %d)", cut, rq.posted-before, ring.RecvHeadroom+1)
	}
	if n, _ := a.take(make([]wr.Completion, 64)); n != 8+ring.RecvHeadroom+1 {
		t.Errorf("the member holds %d completions, want all %d (its engine fails on them too)", n, 8+ring.RecvHeadroom+1)
	}
	if _, err := a.take(make([]wr.Completion, 1)); !errors.Is(err, errCreditOverrun) || !errors.Is(err, ring.ErrProtocol) || !errors.Is(err, ring.ErrCreditOverrun) {
		t.Errorf("after the overrun the member's step fails with %v, want %v, matching ring.ErrProtocol and ring.ErrCreditOverrun", err, errCreditOverrun)
	}
	// Receives a's engine posts now repay what it borrowed: the group put
	// those back already.
	if got := a.accountRecvs(recvs); len(got) != 0 {
		t.Errorf("%d of 8 receives that repay borrowed ones go on the queue, want none", len(got))
	}

	// b leaves with 5 of its receives on the queue: the next 5 that c
	// posts are taken as posted already.
	b.accountRecvs(recvs[:5])
	if err := g.leave(b, nil); err != nil {
		t.Fatal(err)
	}
	c, ok := g.Reserve(20, 10, 10)
	if !ok {
		t.Fatal("the group refused a member in the room b left")
	}
	c.Attach(&numQP{num: 3}, nil)
	if got := c.accountRecvs(recvs); len(got) != 3 {
		t.Errorf("%d of 8 receives go on the queue after a member left 5 there, want 3", len(got))
	}
	if k := a.ClaimRecvs(50); k != 30 {
		t.Errorf("the claims b gave back let a claim %d more, want 30", k)
	}
	if err := g.leave(c, nil); err != nil {
		t.Fatal(err)
	}
	if err := g.leave(a, nil); err != nil {
		t.Fatal(err)
	}
	if !rq.destroyed {
		t.Error("the shared queue is still there after the last member left")
	}
}
