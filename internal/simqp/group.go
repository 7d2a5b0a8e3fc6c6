package simqp

import (
	"net"
	"sync"

	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// GroupCQ is a poll group's CQ (internal/pollgroup's CQ) over a simulated
// fabric's CQ: its channel is the CQ's Notify, which (with
// simfabric.CQOptions.Armed) fires only for a completion added after an
// arm, as a device's does.
type GroupCQ struct {
	CQ          *simfabric.CQ
	interrupted error
	intr        chan struct{}
	stop        chan struct{}
	stopOnce    sync.Once
	destroyed   chan struct{}
}

// NewGroupCQ makes a poll group's CQ over cq whose WaitReady returns
// interrupted (pollgroup.ErrInterrupted) after Interrupt.
func NewGroupCQ(cq *simfabric.CQ, interrupted error) *GroupCQ {
	return &GroupCQ{CQ: cq, interrupted: interrupted, intr: make(chan struct{}, 1),
		stop: make(chan struct{}), destroyed: make(chan struct{})}
}

// Poll takes a leftover event (WaitReady took the one that woke it: a
// channel's token cannot be peeked), arms, then polls. Any event left
// before the arm belongs to completions this poll returns.
func (c *GroupCQ) Poll(flags wr.StepFlags, out []wr.Completion, tries int) (int, error) {
	if flags&wr.StepTakeEvent != 0 {
		select {
		case <-c.CQ.Notify():
		default:
		}
	}
	if flags&wr.StepArm != 0 {
		c.CQ.Arm()
	}
	if flags&wr.StepArmSend != 0 {
		c.CQ.ArmSends()
	}
	return PollTries(c.CQ, out, tries)
}

// PollTries polls cq into out, again while it finds nothing, up to tries
// polls.
func PollTries(cq *simfabric.CQ, out []wr.Completion, tries int) (int, error) {
	n, err := cq.Poll(out)
	for t := tries; n == 0 && err == nil && t > 1; t-- {
		n, err = cq.Poll(out)
	}
	return n, err
}

// WaitReady waits for the CQ's Notify, Interrupt or Shutdown.
func (c *GroupCQ) WaitReady() error {
	select {
	case <-c.CQ.Notify():
		return nil
	case <-c.intr:
		return c.interrupted
	case <-c.stop:
		return net.ErrClosed
	}
}

// Interrupt makes the current or next WaitReady return.
func (c *GroupCQ) Interrupt() {
	select {
	case c.intr <- struct{}{}:
	default:
	}
}

// Shutdown makes WaitReady fail for good.
func (c *GroupCQ) Shutdown() { c.stopOnce.Do(func() { close(c.stop) }) }

// Destroy records that the group destroyed its CQ; a second Destroy panics,
// as it is a bug.
func (c *GroupCQ) Destroy() error {
	close(c.destroyed)
	return nil
}

// Destroyed is closed once the group has destroyed its CQ.
func (c *GroupCQ) Destroyed() <-chan struct{} { return c.destroyed }

// Size is how many completions the CQ holds.
func (c *GroupCQ) Size() int { return c.CQ.Size() }

// GroupEndpoint is a poll group member's queue pair (internal/pollgroup's
// QP) on the simulated fabric: it posts on Endpoint and polls CQ, the
// group's.
type GroupEndpoint struct {
	Endpoint *simfabric.Endpoint
	CQ       *simfabric.CQ
}

// Num is the endpoint's queue pair number.
func (e GroupEndpoint) Num() uint32 { return e.Endpoint.QPNum() }

// Step posts recvs, then sends, then polls the group's CQ into out, up to
// tries polls; with out empty it only posts.
func (e GroupEndpoint) Step(_ *verbs.CQ, _ wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	if len(recvs) > 0 {
		if err := e.Endpoint.PostRecv(recvs); err != nil {
			return 0, err
		}
	}
	if len(sends) > 0 {
		if err := e.Endpoint.PostSend(sends); err != nil {
			return 0, err
		}
	}
	if len(out) == 0 {
		return 0, nil
	}
	return PollTries(e.CQ, out, tries)
}
