package pollgroup

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// TestSendHalfArmedOnlyWhileNeeded: the group arms its CQ's send half only
// while a member needs its sends' completions, so the completion of a send
// that nobody waits for leaves no event for the leader, and its member
// still gets it at its next step; the peer's messages always do.
func TestSendHalfArmedOnlyWhileNeeded(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{Auto: true})
	cq := simqp.NewGroupCQ(f.NewCQ(simfabric.CQOptions{Armed: true, SplitArm: true}), ErrInterrupted)
	g := New(cq, nil)
	m, ok := g.Reserve(8, 8, 0)
	if !ok {
		t.Fatal("the group's CQ is full")
	}
	caps := simfabric.Caps{SendDepth: 4, RecvDepth: 4}
	a, peer := f.PairOn(caps, caps, cq.CQ, nil)
	m.Attach(simqp.GroupEndpoint{Endpoint: a, CQ: cq.CQ}, nil)
	event := func() bool {
		select {
		case <-cq.CQ.Notify():
			return true
		default:
			return false
		}
	}
	send := func(id uint64) {
		t.Helper()
		if err := a.PostSend([]wr.Send{{ID: id, Op: wr.OpWrite, Signaled: true}}); err != nil {
			t.Fatal(err)
		}
	}
	step := func(want uint64) {
		t.Helper()
		out := make([]wr.Completion, 4)
		n, err := m.Step(nil, nil, out, 1)
		if err != nil || n != 1 || out[0].ID != want {
			t.Fatalf("step: %d completions (%v), err %v; want the one of work request %d", n, out[:n], err, want)
		}
	}
	lead := func() {
		t.Helper()
		if g.follow(m) != true {
			t.Fatal("m does not lead")
		}
		if !g.armForLeader(m) {
			t.Fatal("the leader may not park")
		}
	}

	lead()
	send(1)
	if event() {
		t.Fatal("the completion of a send no member needs left an event")
	}
	step(1)

	m.NeedSends(true) // a leader is parked: this arms the send half
	send(2)
	if !event() {
		t.Fatal("a member needs its sends, and the completion of one left no event")
	}
	g.takeEvent(m)
	step(2)

	// The send half stays armed from the last event until its next one:
	// one more send completion may leave an event, and after it none.
	m.NeedSends(false)
	send(3)
	event()
	g.takeEvent(m)
	step(3)
	send(4)
	if event() {
		t.Fatal("after NeedSends(false) and one event: the completion of a send left an event")
	}
	step(4)

	if err := a.PostRecv([]wr.Recv{{ID: ring.RecvIDFlag | 4}}); err != nil {
		t.Fatal(err)
	}
	if err := peer.PostSend([]wr.Send{{ID: 9, Op: wr.OpSend, Signaled: true}}); err != nil {
		t.Fatal(err)
	}
	if !event() {
		t.Fatal("the peer's message left no event")
	}
	g.handOn(m)
}

// TestSendCompletionHandedOverWakesOnlyWhoNeedsIt: the leader's drain
// hands another member the completion of its send; that member's waiter
// is not woken for it unless the member needs its sends' completions, and
// is woken as soon as it does. Its next step gets the completion either
// way.
func TestSendCompletionHandedOverWakesOnlyWhoNeedsIt(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{Auto: true})
	cq := simqp.NewGroupCQ(f.NewCQ(simfabric.CQOptions{Armed: true, SplitArm: true}), ErrInterrupted)
	g := New(cq, nil)
	caps := simfabric.Caps{SendDepth: 4, RecvDepth: 4}
	var ms [2]*Member
	var eps [2]*simfabric.Endpoint
	var peers [2]*simfabric.Endpoint
	for i := range ms {
		m, ok := g.Reserve(8, 8, 0)
		if !ok {
			t.Fatal("the group's CQ is full")
		}
		eps[i], peers[i] = f.PairOn(caps, caps, cq.CQ, nil)
		m.Attach(simqp.GroupEndpoint{Endpoint: eps[i], CQ: cq.CQ}, nil)
		ms[i] = m
	}
	leader, other := ms[0], ms[1]
	woken := func(m *Member) bool {
		select {
		case <-m.wake:
			return true
		default:
			return false
		}
	}
	if !g.follow(leader) || !g.armForLeader(leader) {
		t.Fatal("the leader may not park")
	}
	if err := eps[1].PostSend([]wr.Send{{ID: 1, Op: wr.OpWrite, Signaled: true}}); err != nil {
		t.Fatal(err)
	}
	// A message for the leader wakes it; its drain finds the other's send.
	if err := eps[0].PostRecv([]wr.Recv{{ID: ring.RecvIDFlag | 1}}); err != nil {
		t.Fatal(err)
	}
	if err := peers[0].PostSend([]wr.Send{{ID: 9, Op: wr.OpSend, Signaled: true}}); err != nil {
		t.Fatal(err)
	}
	g.takeEvent(leader)
	if done, _ := leader.ready(); !done {
		t.Fatal("the leader's message did not end its wait")
	}
	if other.pending() != 1 {
		t.Fatalf("the other member's inbox holds %d completions, want its send's", other.pending())
	}
	if woken(other) {
		t.Fatal("the completion of a send its connection does not need woke the other member's waiter")
	}
	if done, _ := other.ready(); done {
		t.Fatal("the other member's Wait would return for a send completion it does not need")
	}
	other.NeedSends(true)
	if !woken(other) {
		t.Fatal("the other member now needs its sends' completions, and its waiter was not woken for the one it holds")
	}
	out := make([]wr.Completion, 4)
	if n, err := other.Step(nil, nil, out, 1); n != 1 || err != nil || out[0].ID != 1 {
		t.Fatalf("the other member's step: %d (%v), %v; want its send's completion", n, out[:n], err)
	}
	g.handOn(leader)
}
