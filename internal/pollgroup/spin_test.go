package pollgroup

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// TestOneSpinnerPerGroup: one member's caller spins at a time; another
// member's EndSpin does not end that turn, the spinner's does, and a
// spinner that leaves the group gives its turn up.
func TestOneSpinnerPerGroup(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{Auto: true})
	cq := simqp.NewGroupCQ(f.NewCQ(simfabric.CQOptions{}), ErrInterrupted)
	g := New(cq, nil)
	var ms [3]*Member
	for i := range ms {
		m, ok := g.Reserve(8, 8, 0)
		if !ok {
			t.Fatal("the group's CQ is full")
		}
		ms[i] = m
	}
	a, b := ms[0], ms[1]
	if !a.TrySpin() {
		t.Fatal("no member spins, and the first may not")
	}
	if b.TrySpin() || a.TrySpin() {
		t.Fatal("a second spin while the first goes on")
	}
	b.EndSpin()
	if b.TrySpin() {
		t.Fatal("a member that never spun ended the spinner's turn")
	}
	a.EndSpin()
	if g.Spinner() || !b.TrySpin() {
		t.Fatal("the spinner ended its spin, and the next may not spin")
	}
	if err := b.Leave(nil); err != nil {
		t.Fatal(err)
	}
	if g.Spinner() || !a.TrySpin() {
		t.Fatal("the spinner left the group and kept its turn")
	}
}

// TestSpinningStepReportsWakes: a spinning step that hands another member
// a completion its waiter needs says so, once (the spinner then yields its
// CPU to that waiter); a spinning step that finds only its own
// completions, and a step that does not spin, do not.
func TestSpinningStepReportsWakes(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{Auto: true})
	cq := simqp.NewGroupCQ(f.NewCQ(simfabric.CQOptions{}), ErrInterrupted)
	g := New(cq, nil)
	caps := simfabric.Caps{SendDepth: 4, RecvDepth: 4}
	var ms [2]*Member
	var peers [2]*simfabric.Endpoint
	for i := range ms {
		m, ok := g.Reserve(8, 8, 0)
		if !ok {
			t.Fatal("the group's CQ is full")
		}
		var ep *simfabric.Endpoint
		ep, peers[i] = f.PairOn(caps, caps, cq.CQ, nil)
		m.Attach(simqp.GroupEndpoint{Endpoint: ep, CQ: cq.CQ}, nil)
		if err := ep.PostRecv([]wr.Recv{{ID: ring.RecvIDFlag | 1}, {ID: ring.RecvIDFlag | 2}}); err != nil {
			t.Fatal(err)
		}
		ms[i] = m
	}
	spinner, other := ms[0], ms[1]
	message := func(i int) {
		t.Helper()
		if err := peers[i].PostSend([]wr.Send{{ID: 9, Op: wr.OpSend}}); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]wr.Completion, 4)
	step := func(m *Member, tries, want int) {
		t.Helper()
		if n, err := m.Step(nil, nil, out, tries); n != want || err != nil {
			t.Fatalf("step: %d completions (%v), want %d", n, err, want)
		}
	}

	message(0)
	step(spinner, spinPollTries, 1)
	if spinner.SpinWokeOthers() {
		t.Fatal("a spinning step found its own message and says it woke another member")
	}
	message(1)
	step(spinner, spinPollTries, 0)
	if !spinner.SpinWokeOthers() {
		t.Fatal("a spinning step woke the other member's waiter and does not say so")
	}
	if spinner.SpinWokeOthers() {
		t.Fatal("a spinning step's wake was reported twice")
	}
	step(other, 1, 1)
	message(1)
	step(spinner, 1, 0)
	if spinner.SpinWokeOthers() {
		t.Fatal("a step that does not spin woke the other member, and says so to a spinner")
	}
}

// spinPollTries is a spinning step's polls, as a busy-polling connection's.
const spinPollTries = 16
