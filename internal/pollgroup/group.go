package pollgroup

import (
	"errors"
	"runtime"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// New makes a group over cq. deviceCQ is the verbs CQ behind cq, which
// the members' queue pairs poll in their steps; nil when cq is not a
// device's.
func New(cq CQ, deviceCQ *verbs.CQ) *Group {
	return &Group{
		cq:       cq,
		deviceCQ: deviceCQ,
		buf:      make([]wr.Completion, batch),
		members:  make(map[uint32]*Member),
	}
}

// Reserve takes room in the CQ for a queue pair with up to depth
// completions outstanding (cqEntries of them reserved in the CQ: fewer
// than depth when the group's shared receive queue reserved room for the
// receives), and recvs receives of the shared queue if the group has one.
// It returns the member that will hold them, or false when the group is
// full or closing.
func (g *Group) Reserve(depth, cqEntries, recvs int) (*Member, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.srq == nil {
		cqEntries, recvs = depth, 0
	}
	if g.closed || g.reserved+cqEntries > g.cq.Size() {
		return nil, false
	}
	if g.srq != nil && g.srq.claimed+recvs > g.srq.claimable {
		return nil, false
	}
	g.reserved += cqEntries
	g.joined++
	m := &Member{
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

// drainLocked polls the CQ until it is empty or for maxDrainRounds polls,
// whichever comes first, doing what flags ask in the first crossing, and
// hands each completion to its member. cut says it stopped at the bound
// with completions left; those may have come before the last arm and left
// no event, so the leader must drain again before it parks. Called with
// pollMu held; a poll error fails the group.
func (g *Group) drainLocked(flags verbs.StepFlags) (cut bool, err error) {
	if g.err != nil {
		return false, g.err
	}
	for round := 1; ; round++ {
		n, err := g.cq.Poll(flags, g.buf, 1)
		if hooks := testHooks.Load(); hooks != nil && hooks.Polled != nil && err == nil {
			hooks.Polled(g, flags, g.buf[:n])
		}
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
		if round >= maxDrainRounds {
			g.armed, g.sendArmed = false, false
			return true, nil
		}
	}
}

// notePollLocked counts a poll of the CQ into g.buf that found n
// completions. Called with pollMu held.
func (g *Group) notePollLocked(n int) {
	g.polled += uint64(n)
	if n < len(g.buf) {
		g.emptied++
	}
}

func (g *Group) markLocked() cqMark { return cqMark{g.polled, g.emptied} }

// passedLocked reports whether every completion in the CQ at mark has been
// polled and handed out since: a poll found the CQ empty, or as many
// completions as the CQ holds were polled (it hands them out oldest first).
// A failed CQ has nothing more to hand out. Called with pollMu held.
func (g *Group) passedLocked(mark cqMark) bool {
	return g.err != nil || g.emptied != mark.emptied || g.polled-mark.polled >= uint64(splitPolls*g.cq.Size())
}

// splitPolls bounds how many completions must be polled past a mark, in
// CQ sizes, to have passed everything in the CQ at the mark, when no poll
// found it empty: a split CQ has two halves of Size, and a poll gives each
// at least half its batch while the other has completions.
const splitPolls = 4

// collectPastLocked polls the CQ, a bounded drain at a time, until
// everything in it at mark has been handed out. Between drains it lets go
// of pollMu, so that the members' steps and the leader get their turn:
// the work is bounded by the CQ's size however fast completions come, and
// each hold of the lock by maxDrainRounds polls. Called with pollMu held,
// which it holds again when it returns.
func (g *Group) collectPastLocked(mark cqMark) {
	for !g.passedLocked(mark) {
		if cut, _ := g.drainLocked(0); cut && !g.passedLocked(mark) {
			g.pollMu.Unlock()
			if hooks := testHooks.Load(); hooks != nil && hooks.BetweenDrains != nil {
				hooks.BetweenDrains(g)
			}
			runtime.Gosched()
			g.pollMu.Lock()
		}
	}
}

// collectAll hands out everything in the CQ now.
func (g *Group) collectAll() {
	g.pollMu.Lock()
	g.collectPastLocked(g.markLocked())
	g.pollMu.Unlock()
}

// armForLeader makes sure the CQ is armed before the leader parks, and its
// send half while members need their sends' completions. It reports false
// when a bounded drain left completions that may have no event: the leader
// must then look again rather than park.
func (g *Group) armForLeader(leader *Member) (parkable bool) {
	g.pollMu.Lock()
	defer g.pollMu.Unlock()
	g.stepper = leader
	defer func() { g.stepper = nil }()
	if g.err != nil {
		return true
	}
	var flags verbs.StepFlags
	if !g.armed {
		flags |= verbs.StepArm
	}
	if g.wantSends > 0 && !g.sendArmed {
		flags |= verbs.StepArmSend
	}
	if flags != 0 {
		g.armed = true
		g.sendArmed = g.sendArmed || flags&verbs.StepArmSend != 0
		g.drainLocked(flags)
	}
	return g.armed && (g.wantSends == 0 || g.sendArmed) || g.err != nil
}

// takeEvent takes the event that woke the leader, arms the CQ again (its
// send half only if members need it: the event may have been its) and
// hands out what it holds.
func (g *Group) takeEvent(leader *Member) {
	g.pollMu.Lock()
	g.stepper = leader
	flags := verbs.StepTakeEvent | verbs.StepArm
	g.armed = true
	g.sendArmed = g.wantSends > 0
	if g.sendArmed {
		flags |= verbs.StepArmSend
	}
	g.drainLocked(flags)
	g.stepper = nil
	g.pollMu.Unlock()
}

// needSendsLocked counts m in or out of the members that need their
// sends' completions, and makes those wake m's waiter or no longer.
// Counting in arms the send half, unless it is armed, if a leader may be
// parked (a leader yet to park arms it itself), and wakes the leader if
// that drain left it something to look at: completions that came while the
// half was unarmed left no event, and the leader waits on the channel, not
// on its wakeup. Called with pollMu held.
func (g *Group) needSendsLocked(m *Member, on bool) {
	if m.needSends == on || on && m.gone {
		return
	}
	m.needSends = on
	m.wakeOnSends(on)
	if !on {
		g.wantSends--
		return
	}
	g.wantSends++
	g.lmu.Lock()
	leader := g.leader
	g.lmu.Unlock()
	if leader == nil || g.err != nil {
		return
	}
	cut := false
	if !g.sendArmed {
		g.sendArmed = true
		g.stepper = m
		cut, _ = g.drainLocked(verbs.StepArmSend)
		g.stepper = nil
	}
	if cut || leader.wakeful() {
		g.cq.Interrupt()
	}
}

// deliverLocked hands each completion to the member whose queue pair it
// belongs to. wokeOthers says it woke the waiter of another member than
// the stepper. Called with pollMu held.
func (g *Group) deliverLocked(wcs []wr.Completion) (wokeOthers bool) {
	if len(wcs) == 0 {
		return false
	}
	for i := range wcs {
		m := g.members[wcs[i].QPNum]
		if g.srq != nil && wcs[i].ID&ring.RecvIDFlag != 0 && g.srq.consumedLocked(m) {
			m.cutOff() // its engine fails on the completion too
		}
		if m == nil {
			g.strays++
			continue
		}
		if m.deliver(&wcs[i], m != g.stepper) && m != g.stepper {
			wokeOthers = true
		}
	}
	if g.srq != nil {
		if err := g.srq.refillLocked(); err != nil {
			g.failLocked(err)
		}
	}
	return wokeOthers
}

// fail fails every member with the CQ's error.
func (g *Group) fail(err error) {
	g.pollMu.Lock()
	g.failLocked(err)
	g.pollMu.Unlock()
}

// failLocked fails every member with the CQ's error: no member can learn
// of its completions any more. Called with pollMu held.
func (g *Group) failLocked(err error) {
	if g.err != nil {
		return
	}
	g.err = err
	g.failed.Store(true)
	for _, m := range g.members {
		m.fail(err)
	}
	g.cq.Interrupt() // the leader, parked on the channel, must see it
}

// leave ends m's membership. destroyQP, if not nil, destroys m's queue
// pair first, with the poll lock held: a device may give its number to the
// next queue pair at once (siw does), and that one cannot attach before
// what the gone one left in the CQ has been handed out (see attach). m
// stays the number's member until then, so those completions still reach
// it (and the shared receive queue's accounts); the CQ is polled a bounded
// drain at a time, and its room stays reserved until m is gone. The last
// member to leave destroys the CQ.
func (g *Group) leave(m *Member, destroyQP func() error) error {
	g.pollMu.Lock()
	var err error
	if destroyQP != nil {
		err = destroyQP()
	}
	g.needSendsLocked(m, false)
	m.gone = true
	if m.attached {
		m.leaving, m.leftAt = true, g.markLocked()
		g.collectPastLocked(m.leftAt)
		if g.members[m.qpNum] == m {
			delete(g.members, m.qpNum)
		}
	}
	last := g.dropLocked(m)
	g.pollMu.Unlock()
	m.EndSpin() // a caller left spinning must not keep the others parked
	g.unfollow(m)
	if !last {
		return err
	}
	g.cq.Shutdown()
	// Under pollMu, which every poll and every refill of the shared
	// receive queue holds: with no member left none comes, and this
	// orders the destruction after the last (see verbs.CQ.Step).
	g.pollMu.Lock()
	if g.srq != nil {
		err = errors.Join(err, g.srq.rq.Destroy())
	}
	err = errors.Join(err, g.cq.Destroy())
	g.pollMu.Unlock()
	return err
}

// dropLocked returns what m reserved and reports whether it was the last
// member, which closes the group. Called with pollMu held.
func (g *Group) dropLocked(m *Member) (last bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reserved -= m.cqEntries
	if g.srq != nil {
		g.srq.leftLocked(m)
	}
	g.joined--
	if g.joined == 0 {
		g.closed = true
	}
	return g.closed
}

// Closed reports whether the last member has left.
func (g *Group) Closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// Strays returns how many completions were polled for no member: a
// queue pair number that found no member means a completion lost to its
// connection.
func (g *Group) Strays() uint64 {
	g.pollMu.Lock()
	defer g.pollMu.Unlock()
	return g.strays
}
