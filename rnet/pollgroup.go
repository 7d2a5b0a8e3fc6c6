package rnet

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Poll groups: many connections, one completion queue.
//
// A connection of a poll group has its own queue pair but no completion
// queue or completion channel of its own: its queue pair completes into the
// group's CQ, whose events come on the group's one channel. Completions are
// handed to their connection by queue pair number, into the member's
// inbox, in the order the CQ gave them. A member that steps its engine
// polls the CQ itself, so a spinning Read catches its reply without a
// wakeup in between.
//
// Members that wait take turns at the channel (leader and followers): the
// first to wait, the leader, parks in the netpoller on the channel for the
// whole group and, when an event comes, polls the CQ and hands over what it
// found; the others park on their own wakeups until a completion is handed
// to them or the lead is passed to them. So a lone waiter is woken by the
// netpoller itself, and a group nobody waits on has no goroutine and takes
// no event: the CQ is armed only while a member waits.
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
	// channel may hold an event; it may wake spuriously. It returns
	// errInterrupted after interrupt, and net.ErrClosed after shutdown.
	waitReady() error
	// interrupt makes the current or next waitReady return.
	interrupt()
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
	cq sharedCQ

	// pollMu is held while the CQ is polled and what the poll found is
	// dispatched, so that each member receives its completions in CQ
	// order. buf is the poll's buffer.
	pollMu sync.Mutex
	buf    []wr.Completion
	err    error // the CQ failed: every member fails with it
	// armed says the CQ was armed and every event since was taken by a
	// crossing that armed it again, or is still on the channel: a
	// completion not yet polled then wakes the leader. Guarded by pollMu.
	armed bool
	// polled counts the completions polled, and emptied the polls that
	// found fewer than a full batch (the CQ was then empty), so that a
	// caller can tell when everything in the CQ at some moment has been
	// handed out (see cqMark). Guarded by pollMu.
	polled  uint64
	emptied uint64

	// lmu guards the lead: the member waiting on the channel for the
	// group, and the followers waiting for it to hand over, oldest first.
	lmu       sync.Mutex
	leader    *groupMember
	followers waitList

	// mu guards members, reserved and closed; a dispatch holds it for
	// reading.
	mu       sync.RWMutex
	members  map[uint32]*groupMember // by queue pair number
	reserved int                     // CQ entries the members (and joiners) reserved
	joined   int                     // members and joiners
	closed   bool                    // the last member left: no one may join
	strays   uint64                  // completions for no member (a queue pair already gone)

	// srq, if not nil, is the group's shared receive queue (see
	// pollgroup_srq.go). sharesRecvs says the group takes members that
	// may share one: it has an SRQ unless the device refused it.
	srq         *groupSRQ
	sharesRecvs bool
}

// newPollGroup makes a group over cq.
func newPollGroup(cq sharedCQ) *pollGroup {
	return &pollGroup{
		cq:      cq,
		buf:     make([]wr.Completion, completionBatch),
		members: make(map[uint32]*groupMember),
	}
}

// reserve takes room in the CQ for a queue pair with up to depth
// completions outstanding (cqEntries of them reserved in the CQ: fewer
// than depth when the group's shared receive queue reserved room for the
// receives), and recvs receives of the shared queue if the group has one.
// It returns the member that will hold them, or false when the group is
// full or closing.
func (g *pollGroup) reserve(depth, cqEntries, recvs int) (*groupMember, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.srq == nil {
		cqEntries, recvs = depth, 0
	}
	if g.closed || g.reserved+cqEntries > g.cq.size() {
		return nil, false
	}
	if g.srq != nil && g.srq.claimed+recvs > g.srq.claimable {
		return nil, false
	}
	g.reserved += cqEntries
	g.joined++
	m := &groupMember{
		g:         g,
		depth:     depth,
		cqEntries: cqEntries,
		inbox:     make([]wr.Completion, min(depth, inboxFirst)),
		wake:      make(chan struct{}, 1),
	}
	if g.srq != nil {
		g.srq.claimed += recvs
		m.recvClaim = recvs
	}
	return m, true
}

// drainLocked polls the CQ until it is empty or for maxStepRounds polls,
// whichever comes first, doing what flags ask in the first crossing, and
// hands each completion to its member: a peer that keeps the CQ full must
// not keep pollMu, and with it every member's step, for ever. cut says it
// stopped at the bound with completions left; those may have come before
// the last arm and left no event, so the leader must drain again before it
// parks. Called with pollMu held; a poll error fails the group.
func (g *pollGroup) drainLocked(flags verbs.StepFlags) (cut bool, err error) {
	if g.err != nil {
		return false, g.err
	}
	for round := 1; ; round++ {
		n, err := g.cq.poll(flags, g.buf, 1)
		flags = 0
		if err != nil {
			g.failLocked(err)
			return false, err
		}
		g.notePollLocked(n)
		g.deliverLocked(g.buf[:n])
		if n < len(g.buf) {
			return false, nil
		}
		if round >= maxStepRounds {
			g.armed = false
			return true, nil
		}
	}
}

// notePollLocked counts a poll of the CQ into g.buf that found n
// completions. Called with pollMu held.
func (g *pollGroup) notePollLocked(n int) {
	g.polled += uint64(n)
	if n < len(g.buf) {
		g.emptied++
	}
}

// cqMark is a moment in the CQ's history: see passedLocked.
type cqMark struct{ polled, emptied uint64 }

func (g *pollGroup) markLocked() cqMark { return cqMark{g.polled, g.emptied} }

// passedLocked reports whether every completion in the CQ at mark has been
// polled and handed out since: a poll found the CQ empty, or as many
// completions as the CQ holds were polled (it hands them out oldest first).
// A failed CQ has nothing more to hand out. Called with pollMu held.
func (g *pollGroup) passedLocked(mark cqMark) bool {
	return g.err != nil || g.emptied != mark.emptied || g.polled-mark.polled >= uint64(g.cq.size())
}

// collectPastLocked polls the CQ, a bounded drain at a time, until
// everything in it at mark has been handed out. Between drains it lets go
// of pollMu, so that the members' steps and the leader get their turn:
// the work is bounded by the CQ's size however fast completions come, and
// each hold of the lock by maxStepRounds polls. Called with pollMu held.
func (g *pollGroup) collectPastLocked(mark cqMark) {
	for !g.passedLocked(mark) {
		if cut, _ := g.drainLocked(0); cut && !g.passedLocked(mark) {
			g.pollMu.Unlock()
			if hook := testHookBetweenDrains.Load(); hook != nil {
				(*hook)(g)
			}
			runtime.Gosched()
			g.pollMu.Lock()
		}
	}
}

// testHookBetweenDrains, set only by tests, is called with pollMu free
// between two drains of collectPastLocked, so that a test can make other
// goroutines take the lock there rather than hope the scheduler does.
var testHookBetweenDrains atomic.Pointer[func(g *pollGroup)]

// collectAll hands out everything in the CQ now: after it, a member's
// inbox holds everything its queue pair completed before.
func (g *pollGroup) collectAll() {
	g.pollMu.Lock()
	g.collectPastLocked(g.markLocked())
	g.pollMu.Unlock()
}

// armForLeader makes sure the CQ is armed before the leader parks. It
// reports false when a bounded drain left completions that may have no
// event: the leader must then look again rather than park.
func (g *pollGroup) armForLeader() (parkable bool) {
	g.pollMu.Lock()
	defer g.pollMu.Unlock()
	if !g.armed && g.err == nil {
		g.armed = true
		g.drainLocked(verbs.StepArm)
	}
	return g.armed || g.err != nil
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
		if g.srq != nil && wcs[i].ID&ring.RecvIDFlag != 0 && g.srq.consumedLocked(m) {
			m.cutOff() // its engine fails on the completion too
		}
		if m == nil {
			g.strays++
			continue
		}
		m.deliver(&wcs[i])
	}
	g.mu.RUnlock()
	if g.srq != nil {
		if err := g.srq.refillLocked(); err != nil {
			g.failLocked(err)
		}
	}
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
	g.cq.interrupt() // the leader, parked on the channel, must see it
}

// leave ends m's membership. destroyQP, if not nil, destroys m's queue
// pair first, with the poll lock held: a device may give its number to the
// next queue pair at once (siw does), and that one cannot attach before
// what the gone one left in the CQ has been handed out (see attach). m
// stays the number's member until then, so those completions still reach
// it (and the shared receive queue's accounts); the CQ is polled a bounded
// drain at a time, and its room stays reserved until m is gone.
func (g *pollGroup) leave(m *groupMember, destroyQP func() error) error {
	g.pollMu.Lock()
	var err error
	if destroyQP != nil {
		err = destroyQP()
	}
	if m.attached {
		m.leaving, m.leftAt = true, g.markLocked()
		g.collectPastLocked(m.leftAt)
	}
	g.mu.Lock()
	if m.attached && g.members[m.qpNum] == m {
		delete(g.members, m.qpNum)
	}
	g.reserved -= m.cqEntries
	if g.srq != nil {
		g.srq.leftLocked(m)
	}
	g.joined--
	last := g.joined == 0
	if last {
		g.closed = true
	}
	g.mu.Unlock()
	g.pollMu.Unlock()
	g.unfollow(m)
	if !last {
		return err
	}
	g.cq.shutdown()
	if g.srq != nil {
		err = errors.Join(err, g.srq.rq.destroy())
	}
	return errors.Join(err, g.cq.destroy())
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

// errInterrupted is waitReady's return after interrupt.
var errInterrupted = errors.New("rdma: wait for the completion channel interrupted")

// The lead.

// follow makes m the leader if there is none (and reports true), else a
// follower.
func (g *pollGroup) follow(m *groupMember) (leads bool) {
	g.lmu.Lock()
	defer g.lmu.Unlock()
	if g.leader == nil {
		g.leader = m
		return true
	}
	g.followers.push(m)
	return false
}

// promoted reports whether m, a follower that woke, now leads; if not, it
// is no longer a follower.
func (g *pollGroup) promoted(m *groupMember) bool {
	g.lmu.Lock()
	defer g.lmu.Unlock()
	if g.leader == m {
		return true
	}
	g.followers.remove(m)
	return false
}

// handOn ends m's lead: the longest-waiting follower leads next.
func (g *pollGroup) handOn(m *groupMember) {
	g.lmu.Lock()
	defer g.lmu.Unlock()
	if g.leader != m {
		return
	}
	g.leader = g.followers.pop()
	if g.leader != nil {
		notify(g.leader.wake)
	}
}

// unfollow takes m out of the lead and the followers, as it leaves.
func (g *pollGroup) unfollow(m *groupMember) {
	g.handOn(m)
	g.lmu.Lock()
	g.followers.remove(m)
	g.lmu.Unlock()
}

// interruptIfLeader wakes m if it leads: it waits on the channel, not on
// its own wakeup.
func (g *pollGroup) interruptIfLeader(m *groupMember) {
	g.lmu.Lock()
	leads := g.leader == m
	g.lmu.Unlock()
	if leads {
		g.cq.interrupt()
	}
}

// waitList is a list of members, linked through them, so that joining and
// leaving it never allocates. Guarded by the group's lmu.
type waitList struct{ head, tail *groupMember }

func (l *waitList) push(m *groupMember) {
	m.prev, m.next, m.listed = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = m
	} else {
		l.head = m
	}
	l.tail = m
}

func (l *waitList) pop() *groupMember {
	m := l.head
	if m != nil {
		l.remove(m)
	}
	return m
}

func (l *waitList) remove(m *groupMember) {
	if !m.listed {
		return
	}
	if m.prev != nil {
		m.prev.next = m.next
	} else {
		l.head = m.next
	}
	if m.next != nil {
		m.next.prev = m.prev
	} else {
		l.tail = m.prev
	}
	m.prev, m.next, m.listed = nil, nil, false
}
