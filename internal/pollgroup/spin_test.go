package pollgroup

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/simqp"
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
