package rnet

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// groupMember is one connection's place in a poll group: the completions
// dispatched to its queue pair and the wakeup of its waiter. It implements
// the completion half of queuePair (step's polling, wait, kick).
type groupMember struct {
	g         *pollGroup
	depth     int    // completions the queue pair may have outstanding
	cqEntries int    // of them, reserved in the CQ by the member
	qpNum     uint32 // set by attach
	attached  bool   // set by attach, under g.mu
	// leaving says leave destroyed the queue pair and hands out what it
	// left in the CQ, which is everything there at leftAt. Guarded by the
	// group's pollMu.
	leaving bool
	leftAt  cqMark

	// With a shared receive queue: the receives m claimed (under g.mu),
	// the ones its engine posted and its queue pair has not consumed, and
	// what cuts the queue pair off when its peer overruns.
	recvClaim int
	recvOut   atomic.Int64
	onCutOff  func()

	// mu guards the inbox (a ring that grows up to depth entries: the
	// queue pair never has more completions outstanding), kicked, stopped
	// and err.
	mu      sync.Mutex
	inbox   []wr.Completion
	head, n int
	kicked  bool
	stopped bool
	cut     bool // cutOff ran
	err     error
	wake    chan struct{} // one pending wakeup for wait
	// parking, if a test sets it (under mu), is signalled each time
	// wait is about to park.
	parking chan struct{}

	// The followers' list links, guarded by the group's lmu.
	prev, next *groupMember
	listed     bool
}

// attach makes m receive the completions of queue pair qpNum. If a queue
// pair of that number has just left, the completions it left in the CQ
// are not m's: attach first sees them handed out, as leave does.
func (m *groupMember) attach(qpNum uint32) {
	g := m.g
	g.pollMu.Lock()
	g.mu.RLock()
	gone := g.members[qpNum]
	g.mu.RUnlock()
	if gone != nil && gone.leaving {
		g.collectPastLocked(gone.leftAt)
	}
	g.mu.Lock()
	m.qpNum, m.attached = qpNum, true
	g.members[qpNum] = m
	g.mu.Unlock()
	g.pollMu.Unlock()
}

// deliver appends one completion to the inbox and wakes the waiter if the
// inbox was empty.
func (m *groupMember) deliver(wc *wr.Completion) {
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

// growInbox doubles the inbox, up to the member's depth.
func (m *groupMember) growInbox() bool {
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
func (m *groupMember) fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	m.mu.Unlock()
	notify(m.wake)
}

// take moves completions from the inbox into out.
func (m *groupMember) take(out []wr.Completion) (int, error) {
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

// step posts with post and returns the completions dispatched to m, up to
// len(out). When none are waiting it polls the group's CQ in post's
// crossing, after whoever polls it now has handed over what they found:
// a step that finds nothing has seen everything completed before it. A
// spinning step (tries > 1) does not wait for that, it comes again. flags
// are the group's business (see armForWaiter).
func (m *groupMember) step(post memberPost, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	g := m.g
	if len(out) > 0 && m.pending() == 0 && g.lockPoll(tries > 1) {
		if g.err != nil {
			g.pollMu.Unlock()
			return m.take(out)
		}
		k, err := post(recvs, sends, g.buf, tries)
		if err == nil {
			g.notePollLocked(k)
			g.deliverLocked(g.buf[:k])
		}
		g.pollMu.Unlock()
		if err != nil {
			return 0, err
		}
		return m.take(out)
	}
	if len(recvs) > 0 || len(sends) > 0 {
		if _, err := post(recvs, sends, nil, 0); err != nil {
			return 0, err
		}
	}
	return m.take(out)
}

func (m *groupMember) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// wait parks the goroutine until a completion is handed to m or kick is
// called: in the netpoller on the group's channel if no other member is
// waiting there (m leads), else on m's own wakeup. After stop it returns
// net.ErrClosed.
func (m *groupMember) wait() (parked bool, err error) {
	// A wakeup left from a delivery that a step has already taken would
	// end this wait at once, for nothing: drop it before looking, so that
	// any delivery after the look leaves a new one.
	select {
	case <-m.wake:
	default:
	}
	if done, err := m.ready(); done {
		return false, err
	}
	m.mu.Lock()
	parking := m.parking
	m.mu.Unlock()
	if parking != nil {
		notify(parking)
	}
	g := m.g
	if g.follow(m) {
		return true, m.lead()
	}
	<-m.wake
	if g.promoted(m) {
		return true, m.lead()
	}
	_, err = m.ready()
	return true, err
}

// lead waits on the group's channel until m has news, taking each event
// and handing out what the CQ holds, then passes the lead on.
func (m *groupMember) lead() error {
	g := m.g
	defer g.handOn(m)
	for {
		parkable := g.armForLeader()
		if done, err := m.ready(); done {
			return err
		}
		if m.handedSince() {
			// Another goroutine of this connection took what was
			// handed over: the caller looks at the connection again.
			return nil
		}
		if !parkable {
			continue // the CQ may hold completions no event will announce
		}
		err := g.cq.waitReady()
		switch {
		case err == nil:
			g.pollMu.Lock()
			g.armed = true
			g.drainLocked(verbs.StepTakeEvent | verbs.StepArm)
			g.pollMu.Unlock()
		case errors.Is(err, errInterrupted):
			// A kick, a stop or a failure: ready says which, or it
			// was for an earlier leader.
		default:
			g.pollMu.Lock()
			g.failLocked(err)
			g.pollMu.Unlock()
		}
	}
}

// ready reports whether wait must return at once, and with what.
func (m *groupMember) ready() (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return true, net.ErrClosed
	}
	if m.n > 0 || m.kicked || m.err != nil {
		m.kicked = false
		return true, nil
	}
	return false, nil
}

// handedSince reports, once, whether a completion was handed to m (or a
// kick came) since its wait dropped the last stale wakeup: the leader
// waits on the channel, not on m.wake, so it looks at the wakeup itself.
func (m *groupMember) handedSince() bool {
	select {
	case <-m.wake:
		return true
	default:
		return false
	}
}

// kick makes the current or next wait return.
func (m *groupMember) kick() {
	m.mu.Lock()
	m.kicked = true
	m.mu.Unlock()
	notify(m.wake)
	m.g.interruptIfLeader(m)
}

// stop makes wait fail for good.
func (m *groupMember) stop() {
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
	notify(m.wake)
	m.g.interruptIfLeader(m)
}
