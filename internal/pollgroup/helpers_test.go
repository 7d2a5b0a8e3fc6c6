package pollgroup

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// simCQ is a poll group's CQ over a simulated fabric's CQ: its channel is
// the CQ's Notify, which (with simfabric.CQOptions.Armed) fires only for
// a completion added after an arm, as a device's does.
type simCQ struct {
	cq        *simfabric.CQ
	intr      chan struct{}
	stop      chan struct{}
	stopOnce  sync.Once
	destroyed chan struct{}
}

func newSimCQ(cq *simfabric.CQ) *simCQ {
	return &simCQ{cq: cq, intr: make(chan struct{}, 1), stop: make(chan struct{}), destroyed: make(chan struct{})}
}

// Poll takes a leftover event (WaitReady took the one that woke it: a
// channel's token cannot be peeked), arms, then polls. Any event left
// before the arm belongs to completions this poll returns.
func (c *simCQ) Poll(flags verbs.StepFlags, out []wr.Completion, tries int) (int, error) {
	if flags&verbs.StepTakeEvent != 0 {
		select {
		case <-c.cq.Notify():
		default:
		}
	}
	if flags&verbs.StepArm != 0 {
		c.cq.Arm()
	}
	return pollTries(c.cq, out, tries)
}

// pollTries polls cq into out, again while it finds nothing, up to tries
// polls.
func pollTries(cq *simfabric.CQ, out []wr.Completion, tries int) (int, error) {
	n, err := cq.Poll(out)
	for t := tries; n == 0 && err == nil && t > 1; t-- {
		n, err = cq.Poll(out)
	}
	return n, err
}

func (c *simCQ) WaitReady() error {
	select {
	case <-c.cq.Notify():
		return nil
	case <-c.intr:
		return ErrInterrupted
	case <-c.stop:
		return net.ErrClosed
	}
}

func (c *simCQ) Interrupt() { notify(c.intr) }
func (c *simCQ) Shutdown()  { c.stopOnce.Do(func() { close(c.stop) }) }
func (c *simCQ) Size() int  { return c.cq.Size() }

func (c *simCQ) Destroy() error {
	close(c.destroyed) // a second destroy is a bug: let it panic
	return nil
}

// simQP is a member's queue pair on a simulated fabric: it posts on its
// endpoint and polls the group's CQ.
type simQP struct {
	ep *simfabric.Endpoint
	cq *simfabric.CQ
}

func (q *simQP) Num() uint32 { return q.ep.QPNum() }

func (q *simQP) Step(_ *verbs.CQ, _ verbs.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	if err := q.ep.PostRecv(recvs); err != nil {
		return 0, err
	}
	if err := q.ep.PostSend(sends); err != nil {
		return 0, err
	}
	if len(out) == 0 {
		return 0, nil
	}
	return pollTries(q.cq, out, tries)
}

// numQP is a queue pair that only has a number: its member's steps poll
// with poll, if set.
type numQP struct {
	num  uint32
	poll func(out []wr.Completion, tries int) (int, error)
}

func (q *numQP) Num() uint32 { return q.num }

func (q *numQP) Step(_ *verbs.CQ, _ verbs.StepFlags, _ []wr.Recv, _ []wr.Send, out []wr.Completion, tries int) (int, error) {
	if len(out) == 0 || q.poll == nil {
		return 0, nil
	}
	return q.poll(out, tries)
}

// waitUntil looks at cond until it holds, for a condition nothing
// signals, sleeping between looks from a few microseconds up to a
// millisecond.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	timeout := time.NewTimer(2 * time.Minute) // a hang detector only
	defer timeout.Stop()
	pause := 4 * time.Microsecond
	for !cond() {
		select {
		case <-timeout.C:
			t.Fatalf("still waiting for %s", what)
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Millisecond)
	}
}

// setHooks sets h for the test's duration.
func setHooks(t *testing.T, h *Hooks) {
	t.Cleanup(SetTestHooks(h))
}
