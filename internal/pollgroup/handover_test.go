package pollgroup

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// heldPoll is a group whose one member's queue pair has a completion
// (ID 7) that another goroutine has polled and holds, with the poll lock,
// not yet handed over: a poller inside a slow crossing.
type heldPoll struct {
	g    *Group
	m    *Member
	held []wr.Completion
	done func()
}

func newHeldPoll(t *testing.T) *heldPoll {
	t.Helper()
	f := simfabric.New(1, simfabric.Options{Auto: true})
	cq := simqp.NewGroupCQ(f.NewCQ(simfabric.CQOptions{}), ErrInterrupted)
	g := New(cq, nil)
	m, ok := g.Reserve(8, 8, 0)
	if !ok {
		t.Fatal("the group's CQ is full")
	}
	a, _ := f.PairOn(simfabric.Caps{SendDepth: 4, RecvDepth: 4}, simfabric.Caps{}, cq.CQ, nil)
	m.Attach(&numQP{num: a.QPNum(), poll: func(out []wr.Completion, tries int) (int, error) {
		return simqp.PollTries(cq.CQ, out, tries)
	}}, nil)
	g.pollMu.Lock()
	if err := a.PostSend([]wr.Send{{ID: 7, Op: wr.OpWrite, Signaled: true}}); err != nil {
		t.Fatal(err)
	}
	held := make([]wr.Completion, 4)
	n, err := cq.CQ.Poll(held)
	if n != 1 || err != nil {
		t.Fatalf("poll: %d, %v", n, err)
	}
	return &heldPoll{g: g, m: m, held: held[:n], done: func() {
		m.Stop()
		f.Kill(a)
		if err := g.leave(m, nil); err != nil {
			t.Error(err)
		}
		<-cq.Destroyed()
	}}
}

// handOver ends the held poll: the completion goes to the member and the
// poll lock is let go.
func (h *heldPoll) handOver() {
	h.g.deliverLocked(h.held)
	h.g.pollMu.Unlock()
}

// waitingForPollLock reports whether a goroutine waits for a lock inside
// the function named fn.
func waitingForPollLock(fn string) bool {
	for _, st := range procstat.Stacks() {
		if strings.Contains(st, fn) && strings.Contains(st, "sync.(*Mutex).Lock") {
			return true
		}
	}
	return false
}

type stepResult struct {
	n   int
	err error
	wc  wr.Completion
}

// TestStepDoesNotWaitForAnothersPoll: a step that finds its inbox empty
// while another goroutine polls the CQ (and holds the poll lock, in a
// crossing a resending device makes slow) posts and returns at once,
// rather than keep its caller's connection lock while it waits. What the
// poller found reaches the member once handed over, and its next step
// returns it.
func TestStepDoesNotWaitForAnothersPoll(t *testing.T) {
	h := newHeldPoll(t)
	defer h.done()
	var crossings atomic.Int64
	setHooks(t, &Hooks{Crossed: func(m *Member) {
		if m == h.m {
			crossings.Add(1)
		}
	}})
	res := make(chan stepResult, 1)
	go func() {
		out := make([]wr.Completion, 4)
		n, err := h.m.Step([]wr.Recv{{ID: 1}}, nil, out, 1)
		res <- stepResult{n, err, out[0]}
	}()
	var got stepResult
	conntest.Until(t, "the step to return or wait for the poll lock", func() bool {
		select {
		case got = <-res:
			return true
		default:
		}
		if waitingForPollLock("pollgroup.(*Member).Step") {
			h.handOver() // let the old code's step go, to fail below
			got = <-res
			t.Fatal("the step waited for another goroutine's poll")
		}
		return false
	})
	if got.n != 0 || got.err != nil {
		t.Fatalf("step while another polls = %d, %v; want nothing yet", got.n, got.err)
	}
	if crossings.Load() != 1 {
		t.Fatalf("the step crossed %d times; want one crossing, for its post", crossings.Load())
	}
	h.handOver()
	if !h.m.Collected() {
		t.Fatal("the completion the poll held was not handed to the member")
	}
	out := make([]wr.Completion, 4)
	if n, err := h.m.Step(nil, nil, out, 1); n != 1 || err != nil || out[0].ID != 7 {
		t.Fatalf("step after the hand-over = %d, %v, %+v; want the completion the poll held", n, err, out[0])
	}
}

// TestCollectAllWaitsForHandOver: CollectAll, which a drain calls before it
// steps, does wait for a poll in progress to hand over what it found: the
// step after it returns the peer's last completion.
func TestCollectAllWaitsForHandOver(t *testing.T) {
	h := newHeldPoll(t)
	defer h.done()
	res := make(chan stepResult, 1)
	go func() {
		h.m.CollectAll()
		out := make([]wr.Completion, 4)
		n, err := h.m.Step(nil, nil, out, 1)
		res <- stepResult{n, err, out[0]}
	}()
	conntest.Until(t, "CollectAll to wait for the poll lock", func() bool {
		return waitingForPollLock("pollgroup.(*Group).collectAll")
	})
	h.handOver()
	if got := <-res; got.n != 1 || got.err != nil || got.wc.ID != 7 {
		t.Fatalf("step after CollectAll = %d, %v, %+v; want the completion the poll in progress held", got.n, got.err, got.wc)
	}
}

// stepCrossing is what one crossing of a member's step did.
type stepCrossing struct {
	sends, polls int // sends posted; completions it could poll
	locked       bool
}

// recordQP records its crossings, and whether the poll lock was held in
// each.
type recordQP struct {
	num       uint32
	g         *Group
	crossings []stepCrossing
}

func (q *recordQP) Num() uint32 { return q.num }

func (q *recordQP) Step(_ *verbs.CQ, _ verbs.StepFlags, _ []wr.Recv, sends []wr.Send, out []wr.Completion, _ int) (int, error) {
	locked := !q.g.pollMu.TryLock()
	if !locked {
		q.g.pollMu.Unlock()
	}
	q.crossings = append(q.crossings, stepCrossing{sends: len(sends), polls: len(out), locked: locked})
	return 0, nil
}

// TestStepPostsBeforeAWaitedPollLock: a step with sends to post, while
// another caller waits for the poll lock (the leader, a drain), posts them
// in a crossing of its own before it takes the lock, so that the waiter
// waits for a poll and not for a transfer a software device makes inside
// the post; with nobody waiting it posts and polls in one crossing.
func TestStepPostsBeforeAWaitedPollLock(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{Auto: true})
	cq := simqp.NewGroupCQ(f.NewCQ(simfabric.CQOptions{}), ErrInterrupted)
	g := New(cq, nil)
	m, ok := g.Reserve(8, 8, 0)
	if !ok {
		t.Fatal("the group's CQ is full")
	}
	q := &recordQP{num: 1, g: g}
	m.Attach(q, nil)
	defer func() {
		m.Stop()
		if err := g.leave(m, nil); err != nil {
			t.Error(err)
		}
		<-cq.Destroyed()
	}()
	out := make([]wr.Completion, 4)
	send := []wr.Send{{ID: 1, Op: wr.OpWrite, Signaled: true}}

	if _, err := m.Step(nil, send, out, 1); err != nil {
		t.Fatal(err)
	}
	if want := []stepCrossing{{sends: 1, polls: batch, locked: true}}; !slices.Equal(q.crossings, want) {
		t.Fatalf("a step with nobody waiting for the poll lock crossed %+v; want %+v", q.crossings, want)
	}

	q.crossings = nil
	g.pollWaiters.Add(1) // a caller in lockPoll, between two holders
	defer g.pollWaiters.Add(-1)
	if _, err := m.Step(nil, send, out, 1); err != nil {
		t.Fatal(err)
	}
	if want := []stepCrossing{{sends: 1, polls: 0, locked: false}, {sends: 0, polls: batch, locked: true}}; !slices.Equal(q.crossings, want) {
		t.Fatalf("a step while another waits for the poll lock crossed %+v; want %+v", q.crossings, want)
	}
}

// TestLockPollCountsWaiters: a caller waiting for the poll lock is counted
// until it has it.
func TestLockPollCountsWaiters(t *testing.T) {
	g := New(nil, nil)
	g.pollMu.Lock()
	took := make(chan struct{})
	go func() {
		g.lockPoll()
		close(took)
		g.pollMu.Unlock()
	}()
	conntest.Until(t, "the caller to be counted as waiting", func() bool { return g.pollWaiters.Load() == 1 })
	g.pollMu.Unlock()
	<-took
	if n := g.pollWaiters.Load(); n != 0 {
		t.Fatalf("%d waiters counted after the caller took the lock", n)
	}
}
