package pollgroup

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Member is one queue pair's place in a poll group: the completions
// handed to it and the wakeup of its waiter. Its Step, Wait and Kick are
// the completion half of a connection's queue pair.
type Member struct {
	g         *Group
	reg       *Registry // the registry the group is in, if any
	depth     int       // completions the queue pair may have outstanding
	cqEntries int       // of them, reserved in the CQ by the member

	// qp is the queue pair Step posts on; set by Attach, before any Step.
	qp QP
	// Set by Attach and read by leave, under the group's pollMu: the
	// queue pair's number, whether it has one, and what cuts it off when
	// its peer overruns the shared receive queue. leaving says leave
	// destroyed the queue pair and hands out what it left in the CQ,
	// which is everything there at leftAt.
	qpNum    uint32
	attached bool
	onCutOff func()
	leaving  bool
	leftAt   cqMark

	// With a shared receive queue: the receives m claimed (under the
	// group's mu), and the ones its engine posted and its queue pair has
	// not consumed.
	recvClaim int
	recvOut   atomic.Int64

	// mu guards the inbox (a ring that grows up to depth entries: the
	// queue pair never has more completions outstanding) and the fields
	// after it up to wake.
	mu      sync.Mutex
	inbox   []wr.Completion
	head, n int
	kicked  bool
	stopped bool
	cut     bool // cutOff ran
	err     error
	wake    chan struct{} // one pending wakeup for Wait

	// The followers' list links, guarded by the group's lmu.
	prev, next *Member
	listed     bool
}

// CQ is the verbs CQ the member's queue pair must complete into (its send
// and receive CQ), or nil if the group is not on a device.
func (m *Member) CQ() *verbs.CQ { return m.g.deviceCQ }

// SRQ is the shared receive queue the member's queue pair must take its
// receives from, or nil if it keeps a receive queue of its own.
func (m *Member) SRQ() *verbs.SRQ { return m.g.deviceSRQ }

// Attach makes m receive the completions of qp, on which its steps post;
// onCutOff, if not nil, ends qp's reception when its peer takes receives
// of the shared queue it has no claim to. If a queue pair of that number
// has just left, the completions it left in the CQ are not m's: Attach
// first sees them handed out, as leave does.
func (m *Member) Attach(qp QP, onCutOff func()) {
	g := m.g
	num := qp.Num()
	g.pollMu.Lock()
	if gone := g.members[num]; gone != nil && gone.leaving {
		g.collectPastLocked(gone.leftAt)
	}
	m.qp, m.qpNum, m.attached, m.onCutOff = qp, num, true, onCutOff
	g.members[num] = m
	g.pollMu.Unlock()
}

// Step posts recvs and sends on m's queue pair and returns the completions
// handed to m, up to len(out). When none are waiting it polls the group's
// CQ in the same crossing, after whoever polls it now has handed over what
// they found: a step that finds nothing has seen everything completed
// before it. A spinning step (tries > 1) does not wait for that: it takes
// the poll lock only if it is free, since it comes again. The caller
// serialises m's steps.
func (m *Member) Step(recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	recvs = m.accountRecvs(recvs)
	g := m.g
	if len(out) > 0 && m.pending() == 0 {
		locked := true
		if tries > 1 {
			locked = g.pollMu.TryLock()
		} else {
			g.pollMu.Lock()
		}
		if locked {
			var err error
			if g.err == nil { // else m has failed with it: take says so
				var k int
				k, err = m.qp.Step(g.deviceCQ, 0, recvs, sends, g.buf, tries)
				m.noteCrossing()
				if err == nil {
					g.notePollLocked(k)
					g.deliverLocked(g.buf[:k])
				}
			}
			g.pollMu.Unlock()
			if err != nil {
				return 0, err
			}
			return m.take(out)
		}
	}
	if len(recvs) > 0 || len(sends) > 0 {
		_, err := m.qp.Step(nil, 0, recvs, sends, nil, 0)
		m.noteCrossing()
		if err != nil {
			return 0, err
		}
	}
	return m.take(out)
}

// Collected reports that completions were handed to m that Step returns
// without polling.
func (m *Member) Collected() bool { return m.pending() > 0 }

// CollectAll hands out everything in the group's CQ now: after it, m's
// inbox holds everything its queue pair completed before.
func (m *Member) CollectAll() { m.g.collectAll() }

// deliver appends one completion to the inbox and wakes the waiter if the
// inbox was empty.
func (m *Member) deliver(wc *wr.Completion) {
	m.mu.Lock()
	if m.n == len(m.inbox) && !m.growInbox() {
		// More completions than work requests posted: the device broke
		// its contract. Fail this connection alone.
		m.err = errInboxOverflow
		m.mu.Unlock()
		notify(m.wake)
		return
	}
	m.inbox[(m.head+m.n)%len(m.inbox)] = *wc
	m.n++
	first := m.n == 1
	m.mu.Unlock()
	if first {
		notify(m.wake)
	}
}

// inboxFirst is the inbox's first size: an idle connection has few
// completions outstanding, and a busy one grows its inbox once.
const inboxFirst = 16

// growInbox doubles the inbox, up to the member's depth. Called with mu
// held.
func (m *Member) growInbox() bool {
	if len(m.inbox) >= m.depth {
		return false
	}
	bigger := make([]wr.Completion, min(2*len(m.inbox), m.depth))
	for i := range m.n {
		bigger[i] = m.inbox[(m.head+i)%len(m.inbox)]
	}
	m.inbox, m.head = bigger, 0
	return true
}

var errInboxOverflow = errors.New("rdma: more completions than work requests posted on the queue pair")

// fail makes the member's next step return err.
func (m *Member) fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	m.mu.Unlock()
	notify(m.wake)
}

// take moves completions from the inbox into out.
func (m *Member) take(out []wr.Completion) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := 0
	for k < len(out) && m.n > 0 {
		out[k] = m.inbox[m.head]
		m.head = (m.head + 1) % len(m.inbox)
		m.n--
		k++
	}
	if k == 0 && m.err != nil {
		return 0, m.err
	}
	return k, nil
}

func (m *Member) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// Leave ends m's membership: destroyQP, if not nil, destroys its queue
// pair first (see Group.leave), and the last member to leave frees the
// group. m stays usable for Kick and Stop.
func (m *Member) Leave(destroyQP func() error) error {
	if m.reg != nil {
		return m.reg.leave(m, destroyQP)
	}
	return m.g.leave(m, destroyQP)
}

// Kick makes the current or next Wait return.
func (m *Member) Kick() {
	m.mu.Lock()
	m.kicked = true
	m.mu.Unlock()
	notify(m.wake)
	m.g.interruptIfLeader(m)
}

// Stop makes Wait fail for good.
func (m *Member) Stop() {
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
	notify(m.wake)
	m.g.interruptIfLeader(m)
}
