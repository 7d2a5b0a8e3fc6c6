package pollgroup

import (
	"errors"
	"runtime"
	"testing"
	"time"

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

// postingQP closes posted at its first crossing that posts without polling,
// and records every crossing as posts and polls.
type postingQP struct {
	posted   chan struct{}
	crossing []crossing
	sent     []int // sends posted at each crossing
	err      error // what its posts return
}

func (q *postingQP) Num() uint32 { return 6 }

func (q *postingQP) Step(_ *verbs.CQ, _ verbs.StepFlags, _ []wr.Recv, sends []wr.Send, out []wr.Completion, _ int) (int, error) {
	q.crossing = append(q.crossing, crossing{polled: len(out) > 0})
	q.sent = append(q.sent, len(sends))
	if len(out) == 0 && len(sends) > 0 && q.posted != nil {
		close(q.posted)
		q.posted = nil
	}
	return 0, q.err
}

// contendedStep makes one step, which must not wait for the poll lock, of
// a member of a group whose poll lock another member holds, and returns
// its error and whether the group's CQ was polled.
func contendedStep(t *testing.T, qp *postingQP, tries int) (error, bool) {
	t.Helper()
	g := New(&floodCQ{entries: 64, intr: make(chan struct{}, 1), stop: make(chan struct{})}, nil)
	m, ok := g.Reserve(16, 16, 0)
	if !ok {
		t.Fatal("the group has no room for a member")
	}
	m.Attach(qp, nil)
	g.pollMu.Lock()
	before := g.polled + g.emptied
	_, err := m.Step(nil, make([]wr.Send, 2), make([]wr.Completion, 4), tries)
	polled := g.polled+g.emptied != before
	g.pollMu.Unlock()
	m.Stop()
	if err := m.Leave(nil); err != nil {
		t.Fatal(err)
	}
	return err, polled
}

// TestContendedStepWithoutWaiting: a step that need not wait for its turn
// to poll (a spinning one, or one whose post failed) returns without the
// poll lock, after one crossing that posts; on a failed group it posts
// nothing and reports the group's error.
func TestContendedStepWithoutWaiting(t *testing.T) {
	spin := &postingQP{}
	if err, polled := contendedStep(t, spin, 8); err != nil || polled || len(spin.sent) != 1 || spin.sent[0] != 2 || spin.crossing[0].polled {
		t.Errorf("spinning step: err %v, polled %v, crossings %+v posting %v; want one that posts 2 and no poll", err, polled, spin.crossing, spin.sent)
	}
	refused := errors.New("post refused")
	failing := &postingQP{err: refused}
	if err, polled := contendedStep(t, failing, 1); !errors.Is(err, refused) || polled || len(failing.sent) != 1 {
		t.Errorf("step whose post fails: err %v, polled %v, crossings %+v; want the post's error after one crossing", err, polled, failing.crossing)
	}
}

// TestStepPostsBeforeWaitingToPoll: a step that finds another member
// polling posts at once, in a crossing of its own, and polls without
// posting again once its turn comes; so a post, whose protocol work rxe
// does in the system call, never holds up the others' polls.
func TestStepPostsBeforeWaitingToPoll(t *testing.T) {
	g := New(&floodCQ{entries: 64, intr: make(chan struct{}, 1), stop: make(chan struct{})}, nil)
	m, ok := g.Reserve(16, 16, 0)
	if !ok {
		t.Fatal("the group has no room for a member")
	}
	posted := make(chan struct{})
	q := &postingQP{posted: posted}
	m.Attach(q, nil)
	g.pollMu.Lock() // another member polls
	stepped := make(chan error, 1)
	go func() {
		_, err := m.Step(nil, make([]wr.Send, 3), make([]wr.Completion, 4), 1)
		stepped <- err
	}()
	select {
	case <-posted:
	case <-time.After(time.Minute):
		t.Fatal("the step did not post while another member held the poll lock")
	}
	g.pollMu.Unlock()
	if err := <-stepped; err != nil {
		t.Fatal(err)
	}
	if len(q.crossing) != 2 || q.crossing[0].polled || q.sent[0] != 3 || !q.crossing[1].polled || q.sent[1] != 0 {
		t.Fatalf("crossings %+v posting %v sends; want one that posts 3 and one that polls and posts none", q.crossing, q.sent)
	}
	m.Stop()
	if err := m.Leave(nil); err != nil {
		t.Fatal(err)
	}
}
