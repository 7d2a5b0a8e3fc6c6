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
