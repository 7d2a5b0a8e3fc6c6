package pollgroup

import (
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// CQ is the verbs CQ the member's queue pair must complete into: its
// receive completions into it, its send completions into CQ().Send(). Nil
// if the group is not on a device.
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
// the poll lock only if it is free, since it comes again. If another
// member holds the poll lock, m posts before it waits for it, in a crossing
// of its own: rxe does a queue pair's protocol work (resends included) in
// the post's system call, which under the lock every member's poll would
// wait for. The caller serialises m's steps.
func (m *Member) Step(recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	recvs = m.accountRecvs(recvs)
	g := m.g
	if len(out) > 0 && m.pending() == 0 {
		locked := g.pollMu.TryLock()
		if !locked && !g.failed.Load() && (len(recvs) > 0 || len(sends) > 0) {
			_, err := m.qp.Step(nil, 0, recvs, sends, nil, 0)
			m.noteCrossing()
			if err != nil {
				return 0, err
			}
			recvs, sends = nil, nil
		}
		if !locked && tries <= 1 {
			g.pollMu.Lock()
			locked = true
		}
		if locked {
			var err error
			if g.err == nil { // else m has failed with it: take says so
				var k int
				k, err = m.qp.Step(g.deviceCQ, 0, recvs, sends, g.buf, tries)
				m.noteCrossing()
				if err == nil {
					g.notePollLocked(k)
					g.stepper = m
					if g.deliverLocked(g.buf[:k]) && tries > 1 {
						m.spinWoke.Store(true)
					}
					g.stepper = nil
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

// NeedSends says whether m's connection needs the completions of its
// sends to go on: bytes held back until a send completes, a writer waiting
// for room, a close draining. While no member does, the group leaves its
// CQ's send half unarmed, and a send's completion wakes no waiter; it
// waits in the CQ for the next step. Turning it on arms the send half, in
// a crossing, if a leader may be parked without it.
func (m *Member) NeedSends(on bool) {
	g := m.g
	g.pollMu.Lock()
	g.needSendsLocked(m, on)
	g.pollMu.Unlock()
}

// Collected reports that completions were handed to m that Step returns
// without polling.
func (m *Member) Collected() bool { return m.pending() > 0 }

// CollectAll hands out everything in the group's CQ now: after it, m's
// inbox holds everything its queue pair completed before.
func (m *Member) CollectAll() { m.g.collectAll() }

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
