package pollgroup

import (
	"runtime"
	"testing"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// crossingQP records, at each crossing, which function called it and
// which of the group's locks were held.
type crossingQP struct {
	g        *Group
	m        *Member
	crossing []crossing
}

type crossing struct {
	caller                    string
	polled                    bool
	pollMu, groupMu, memberMu bool // held at the crossing
	leadMu                    bool
}

func (q *crossingQP) Num() uint32 { return 5 }

func (q *crossingQP) Step(_ *verbs.CQ, _ verbs.StepFlags, _ []wr.Recv, _ []wr.Send, out []wr.Completion, _ int) (int, error) {
	c := crossing{polled: len(out) > 0}
	if pc, _, _, ok := runtime.Caller(1); ok {
		c.caller = runtime.FuncForPC(pc).Name()
	}
	held := func(try func() bool, unlock func()) bool {
		if try() {
			unlock()
			return false
		}
		return true
	}
	c.pollMu = held(q.g.pollMu.TryLock, q.g.pollMu.Unlock)
	c.groupMu = held(q.g.mu.TryLock, q.g.mu.Unlock)
	c.memberMu = held(q.m.mu.TryLock, q.m.mu.Unlock)
	c.leadMu = held(q.g.lmu.TryLock, q.g.lmu.Unlock)
	q.crossing = append(q.crossing, c)
	return 0, nil
}

// TestStepCrossesFromMemberStep: a member's Step calls its queue pair's
// Step itself, with no callback in between, holding at the crossing the
// poll lock when it polls and no lock of the group's when it only posts.
func TestStepCrossesFromMemberStep(t *testing.T) {
	g := New(&floodCQ{entries: 64, intr: make(chan struct{}, 1), stop: make(chan struct{})}, nil)
	m, ok := g.Reserve(16, 16, 0)
	if !ok {
		t.Fatal("the group has no room for a member")
	}
	q := &crossingQP{g: g, m: m}
	m.Attach(q, nil)
	sends := make([]wr.Send, 1)
	if _, err := m.Step(nil, sends, make([]wr.Completion, 4), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Step(nil, sends, nil, 1); err != nil {
		t.Fatal(err)
	}
	if len(q.crossing) != 2 || !q.crossing[0].polled || q.crossing[1].polled {
		t.Fatalf("crossings %+v, want one that polls and one that only posts", q.crossing)
	}
	for i, c := range q.crossing {
		if want := "github.com/rnet-dev/rnet/internal/pollgroup.(*Member).Step"; c.caller != want {
			t.Errorf("crossing %d was called from %s, want %s", i, c.caller, want)
		}
		if c.pollMu != c.polled || c.groupMu || c.memberMu || c.leadMu {
			t.Errorf("crossing %d (polls: %v) held pollMu %v, the group's mu %v, the member's mu %v, the lead's %v; want pollMu only when it polls",
				i, c.polled, c.pollMu, c.groupMu, c.memberMu, c.leadMu)
		}
	}
	m.Stop()
	if err := m.Leave(nil); err != nil {
		t.Fatal(err)
	}
}
