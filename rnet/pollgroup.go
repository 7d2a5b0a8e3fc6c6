package rnet

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Poll groups: many connections, one completion queue.
//
// A connection of a poll group has its own queue pair but no completion
// queue or completion channel of its own: its queue pair completes into the
// group's CQ, whose events come on the group's one channel. Completions are
// handed to their connection by queue pair number, into the member's
// inbox, in the order the CQ gave them. The group's dispatcher goroutine
// parks in the netpoller on the channel; a member that steps its engine
// polls the CQ itself, so a spinning Read catches its reply without a
// wakeup in between.
//
// The CQ is armed only while a member waits: a member that is about to
// park arms it (unless it is armed already), and the dispatcher arms it
// again after an event only if a member still waits. So a busy group whose
// connections are stepping, not waiting, takes no event per completion.
//
// The group's CQ must never overflow, since an overflow fails every queue
// pair on it: each member reserves room for every completion its queue
// pair can have outstanding (its send and receive depths) and a group takes
// members only while the reservations fit.

// sharedCQ is a poll group's completion queue and the channel its events
// come on.
type sharedCQ interface {
	// poll does what flags ask (take the event that woke waitReady, arm
	// the CQ), then polls up to len(out) completions, polling again while
	// none came, up to tries polls: one crossing.
	poll(flags verbs.StepFlags, out []wr.Completion, tries int) (int, error)
	// waitReady parks the calling goroutine in the netpoller until the
	// channel may hold an event; it may wake spuriously. After shutdown
	// it returns net.ErrClosed.
	waitReady() error
	// shutdown makes waitReady fail for good.
	shutdown()
	// destroy frees the CQ and its channel, once no queue pair uses it and
	// nothing waits or polls.
	destroy() error
	// size is how many completions the CQ holds.
	size() int
}

// memberPost posts a member's receives and sends on its own queue pair
// and, when out is not empty, polls the group's CQ into out, up to tries
// polls, in the same crossing.
type memberPost func(recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error)

// pollGroup is one shared CQ and the members whose queue pairs complete
// into it.
type pollGroup struct {
	cq   sharedCQ
	done chan struct{} // closed when the dispatcher has returned

	// pollMu is held while the CQ is polled and what the poll found is
	// dispatched, so that each member receives its completions in CQ
	// order. buf is the poll's buffer.
	pollMu sync.Mutex
	buf    []wr.Completion
	err    error // the CQ failed: every member fails with it
	// armed says the CQ was armed and no event has been taken since:
	// a completion not yet polled then leaves an event. Guarded by pollMu.
	armed bool
	// waiters counts members in wait; the dispatcher re-arms while it is
	// not 0. A member counts itself before it looks at armed under pollMu,
	// so the two never both skip the arm.
	waiters atomic.Int32

	// mu guards members, reserved and closed; a dispatch holds it for
	// reading.
	mu       sync.RWMutex
	members  map[uint32]*groupMember // by queue pair number
	reserved int                     // CQ entries the members (and joiners) reserved
	joined   int                     // members and joiners
	closed   bool                    // the last member left: no one may join
	strays   uint64                  // completions for no member (a queue pair already gone)
}

// newPollGroup starts a group over cq; its dispatcher runs until the last
// member leaves.
func newPollGroup(cq sharedCQ) *pollGroup {
	g := &pollGroup{
		cq:      cq,
		done:    make(chan struct{}),
		buf:     make([]wr.Completion, completionBatch),
		members: make(map[uint32]*groupMember),
	}
	go g.dispatch()
	return g
}

// reserve takes room in the CQ for a queue pair with up to depth
// completions outstanding, and returns the member that will hold them, or
// false when the group is full or closing.
func (g *pollGroup) reserve(depth int) (*groupMember, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.reserved+depth > g.cq.size() {
		return nil, false
	}
	g.reserved += depth
	g.joined++
	return &groupMember{
		g:     g,
		depth: depth,
		inbox: make([]wr.Completion, min(depth, inboxFirst)),
		wake:  make(chan struct{}, 1),
	}, true
}

// dispatch is the group's goroutine: it parks until the channel has an
// event, then takes it and polls the CQ until empty, handing each
// completion to its member, arming the CQ again in the first crossing if a
// member waits.
func (g *pollGroup) dispatch() {
	defer close(g.done)
	for {
		if err := g.cq.waitReady(); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				g.pollMu.Lock()
				g.failLocked(err)
				g.pollMu.Unlock()
			}
			return
		}
		g.pollMu.Lock()
		flags := verbs.StepTakeEvent
		if g.waiters.Load() > 0 {
			flags |= verbs.StepArm
		}
		g.armed = flags&verbs.StepArm != 0
		err := g.drainLocked(flags)
		g.pollMu.Unlock()
		if err != nil {
			return
		}
	}
}

// drainLocked polls the CQ until it is empty, doing what flags ask in the
// first crossing, and hands each completion to its member. Called with
// pollMu held; a poll error fails the group.
func (g *pollGroup) drainLocked(flags verbs.StepFlags) error {
	if g.err != nil {
		return g.err
	}
	for {
		n, err := g.cq.poll(flags, g.buf, 1)
		flags = 0
		if err != nil {
			g.failLocked(err)
			return err
		}
		g.deliverLocked(g.buf[:n])
		if n < len(g.buf) {
			return nil
		}
	}
}

// collectAll polls the CQ until it is empty, handing each completion to
// its member: after it, a member's inbox holds everything its queue pair
// completed before.
func (g *pollGroup) collectAll() {
	g.pollMu.Lock()
	g.drainLocked(0)
	g.pollMu.Unlock()
}

// armForWaiter makes sure the CQ is armed for a member about to park,
// which counted itself in waiters first.
func (g *pollGroup) armForWaiter() {
	g.pollMu.Lock()
	if !g.armed && g.err == nil {
		g.armed = true
		g.drainLocked(verbs.StepArm)
	}
	g.pollMu.Unlock()
}

// deliverLocked hands each completion to the member whose queue pair it
// belongs to. Called with pollMu held.
func (g *pollGroup) deliverLocked(wcs []wr.Completion) {
	if len(wcs) == 0 {
		return
	}
	g.mu.RLock()
	for i := range wcs {
		m := g.members[wcs[i].QPNum]
		if m == nil {
			g.strays++
			continue
		}
		m.deliver(&wcs[i])
	}
	g.mu.RUnlock()
}

// failLocked fails every member with the CQ's error: no member can learn
// of its completions any more. Called with pollMu held.
func (g *pollGroup) failLocked(err error) {
	if g.err != nil {
		return
	}
	g.err = err
	g.mu.RLock()
	for _, m := range g.members {
		m.fail(err)
	}
	g.mu.RUnlock()
}

// leave ends m's membership. destroyQP, if not nil, destroys m's queue
// pair first, with the poll lock held: a device may give its number to the
// next queue pair at once (siw does), and that one cannot attach before
// the CQ is drained of what the gone one left in it.
func (g *pollGroup) leave(m *groupMember, destroyQP func() error) error {
	g.pollMu.Lock()
	var err error
	if destroyQP != nil {
		err = destroyQP()
	}
	if m.attached {
		g.drainLocked(0)
	}
	g.mu.Lock()
	if m.attached && g.members[m.qpNum] == m {
		delete(g.members, m.qpNum)
	}
	g.reserved -= m.depth
	g.joined--
	last := g.joined == 0
	if last {
		g.closed = true
	}
	g.mu.Unlock()
	g.pollMu.Unlock()
	if !last {
		return err
	}
	g.cq.shutdown()
	<-g.done
	return errors.Join(err, g.cq.destroy())
}

// groupMember is one connection's place in a poll group: the completions
// dispatched to its queue pair and the wakeup of its waiter. It implements
// the completion half of queuePair (step's polling, wait, kick).
type groupMember struct {
	g        *pollGroup
	depth    int    // CQ entries reserved
	qpNum    uint32 // set by attach
	attached bool   // set by attach, under g.mu

	// mu guards the inbox (a ring that grows up to depth entries: the
	// queue pair never has more completions outstanding), kicked, stopped
	// and err.
	mu      sync.Mutex
	inbox   []wr.Completion
	head, n int
	kicked  bool
	stopped bool
	err     error
	wake    chan struct{} // one pending wakeup for wait
	// parking, if a test sets it (under mu), is signalled each time
	// wait is about to park.
	parking chan struct{}
}

// attach makes m receive the completions of queue pair qpNum. It waits
// for a leave in progress to drain the CQ (see leave).
func (m *groupMember) attach(qpNum uint32) {
	g := m.g
	g.pollMu.Lock()
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

// isClosed reports whether the last member has left.
func (g *pollGroup) isClosed() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.closed
}

// lockPoll takes pollMu, or reports false: a spinning step takes it only
// if it is free, since it comes again anyway.
func (g *pollGroup) lockPoll(spinning bool) bool {
	if spinning {
		return g.pollMu.TryLock()
	}
	g.pollMu.Lock()
	return true
}

func (m *groupMember) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// wait parks the goroutine (not in the netpoller: the dispatcher is
// there) until a completion is dispatched to m or kick is called, arming
// the group's CQ first if nobody has. After stop it returns net.ErrClosed.
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
	g := m.g
	g.waiters.Add(1)
	g.armForWaiter()
	m.mu.Lock()
	parking := m.parking
	m.mu.Unlock()
	if parking != nil {
		notify(parking)
	}
	<-m.wake
	g.waiters.Add(-1)
	m.mu.Lock()
	m.kicked = false
	stopped := m.stopped
	m.mu.Unlock()
	if stopped {
		return true, net.ErrClosed
	}
	return true, nil
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

// kick makes the current or next wait return.
func (m *groupMember) kick() {
	m.mu.Lock()
	m.kicked = true
	m.mu.Unlock()
	notify(m.wake)
}

// stop makes wait fail for good.
func (m *groupMember) stop() {
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
	notify(m.wake)
}
