package pollgroup

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/simqp"
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
