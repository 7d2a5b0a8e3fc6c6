package pollgroup

import (
	"errors"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// CQ is a poll group's completion queue and the channel its events come
// on: on a device, the verbs CQ and its completion channel.
type CQ interface {
	// Poll does what flags ask (take the event that woke WaitReady, arm
	// the CQ), then polls up to len(out) completions, polling again while
	// none came, up to tries polls: one crossing.
	Poll(flags verbs.StepFlags, out []wr.Completion, tries int) (int, error)
	// WaitReady parks the calling goroutine in the netpoller until the
	// channel may hold an event; it may wake spuriously. It returns
	// ErrInterrupted after Interrupt, and net.ErrClosed after Shutdown.
	WaitReady() error
	// Interrupt makes the current or next WaitReady return.
	Interrupt()
	// Shutdown makes WaitReady fail for good.
	Shutdown()
	// Destroy frees the CQ and its channel, once no queue pair uses it and
	// nothing waits or polls.
	Destroy() error
	// Size is how many completions the CQ holds.
	Size() int
}

// QP is a member's queue pair as its Step posts on it: *verbs.QP on a
// device. Step posts recvs, then sends, and polls cq (the group's CQ on a
// device, nil otherwise) into out, up to tries polls, in one crossing;
// with out empty it only posts.
type QP interface {
	Step(cq *verbs.CQ, flags verbs.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error)
	// Num is the queue pair's number, which its completions carry.
	Num() uint32
}

// RQ is a poll group's shared receive queue.
type RQ interface {
	// Post posts n receives without a buffer.
	Post(n int) error
	// Destroy frees the queue once no queue pair uses it.
	Destroy() error
}

// ErrInterrupted is WaitReady's return after Interrupt.
var ErrInterrupted = errors.New("rdma: wait for the completion channel interrupted")

const (
	// batch is how many completions one poll takes, in one crossing: as
	// many as a connection's step takes.
	batch = 64
	// maxDrainRounds bounds the polls a drain makes with pollMu held: a
	// peer that keeps the CQ full must not keep the lock, and with it every
	// member's step, for ever. It is a connection step's bound too.
	maxDrainRounds = 16
)

// notify leaves a wakeup on ch without blocking: one pending wakeup is
// enough.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
