package pollgroup

import (
	"sync/atomic"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// A poll group's shared receive queue.
//
// On RoCE and InfiniBand a group's queue pairs take their receives from one
// shared receive queue (SRQ). A receive there carries no buffer (the data
// goes to the connection's own ring, by RDMA WRITE WITH IMMEDIATE), so any
// of them serves any connection, and credits stay per connection as the
// rsocket protocol needs: each member claims receives of the queue for its
// credit window and headroom, and its engine posts them as it would on a
// queue of its own. The queue holds at most what the members claimed, so a
// peer that keeps to its credits never finds it empty.
//
// A peer that sends past its credits takes receives posted for others.
// The group posts a receive in place of each one taken, and once the peer
// has taken more than a headroom's worth (see consumedLocked) it cuts that
// connection off; the queue also holds srqSpare receives beyond the
// claims, for what such a peer sends before the group polls. The other
// peers' messages meanwhile wait for receives (RNR) and are retried, not
// lost.
// iWARP has no such retry (a SEND that finds no receive fails its queue
// pair), so iWARP groups keep a receive queue per queue pair.

const (
	// srqClaimable is how many receives a group's members may claim in
	// all: with the default sizes, about 170 idle connections or 20 at
	// the largest credit window. The SRQ's completions share the group's
	// CQ, which reserves room for all of them.
	srqClaimable = 8192
	// srqSpare is how many receives the queue holds beyond the claims.
	srqSpare = 256
)

// anonymousRecvs are the group's own receives: no buffer, and an ID
// engines take for a receive, which on a shared queue is all it needs.
var anonymousRecvs = func() (r [64]wr.Recv) {
	for i := range r {
		r[i].ID = ring.RecvIDFlag
	}
	return r
}()

// accountRecvs records that m's engine posts recvs and returns the ones
// to put on the shared queue: receives its queue pair borrowed were put
// back by the group already, and receives a departed member left on the
// queue serve in place of the rest.
func (m *Member) accountRecvs(recvs []wr.Recv) []wr.Recv {
	s := m.g.srq
	if s == nil || len(recvs) == 0 {
		return recvs
	}
	k := int64(len(recvs))
	if owed := m.recvOut.Add(k) - k; owed < 0 {
		recvs = recvs[min(-owed, k):]
	}
	for len(recvs) > 0 {
		b := s.balance.Load()
		if b <= 0 {
			return recvs
		}
		k := min(b, int64(len(recvs)))
		if s.balance.CompareAndSwap(b, b-k) {
			return recvs[k:]
		}
	}
	return recvs
}

// ClaimRecvs claims up to n more receives of the shared queue for m, for a
// wider credit window, and returns how many it got.
func (m *Member) ClaimRecvs(n int) int {
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.srq
	if s == nil || g.closed {
		return 0
	}
	k := max(min(n, s.claimable-s.claimed), 0)
	s.claimed += k
	m.recvClaim += k
	return k
}

// consumedLocked accounts for a receive completion of m's queue pair (nil:
// of one that has left) and reports whether m has now taken more receives
// than it may borrow. A queue pair borrows a receive when its engine has
// not put back the ones its peer consumed yet: on a queue of its own the
// peer would wait (RNR) until it did. It may borrow up to RecvHeadroom,
// what an honest peer's control messages can take between two polls.
// Called with pollMu held.
func (s *groupSRQ) consumedLocked(m *Member) (overrun bool) {
	if m != nil && m.recvOut.Add(-1) >= 0 {
		return false
	}
	s.balance.Add(-1) // the receive was posted for another: post it back
	if m == nil || m.recvOut.Load() >= -ring.RecvHeadroom {
		return false
	}
	s.overruns.Add(1)
	return true
}

// refillLocked posts back the receives peers took without a claim.
// Called with pollMu held.
func (s *groupSRQ) refillLocked() error {
	for {
		b := s.balance.Load()
		if b >= 0 {
			return nil
		}
		k := min(-b, int64(len(anonymousRecvs)))
		if !s.balance.CompareAndSwap(b, b+k) {
			continue
		}
		if err := s.rq.Post(int(k)); err != nil {
			s.balance.Add(-k)
			return err
		}
		srqRefills.Add(uint64(k))
	}
}

// srqRefills counts the receives every group posted back on its shared
// queue for peers that took them without a claim.
var srqRefills atomic.Uint64

// SRQRefills returns how many receives the process's poll groups posted
// back on their shared receive queues in place of ones taken without a
// claim.
func SRQRefills() uint64 { return srqRefills.Load() }

// leftLocked returns m's claims and the receives it left on the queue.
// Called with the group's mu held.
func (s *groupSRQ) leftLocked(m *Member) {
	s.claimed -= m.recvClaim
	m.recvClaim = 0
	s.balance.Add(max(m.recvOut.Swap(0), 0)) // borrowed ones were put back already
}

// ShareRecvs gives g the shared receive queue rq, of which members may
// claim claimable receives, and posts its spare receives. Called before g
// has members.
func (g *Group) ShareRecvs(rq RQ, claimable int) error {
	s := &groupSRQ{rq: rq, claimable: claimable}
	s.balance.Store(-srqSpare)
	if err := s.refillLocked(); err != nil {
		return err
	}
	g.srq = s
	g.reserved = claimable + srqSpare // their completions share the CQ
	return nil
}

// cutOff fails m and ends its queue pair's reception, once: its peer
// sent past its credits. Called with pollMu held.
func (m *Member) cutOff() {
	m.mu.Lock()
	cut := m.cut
	m.cut = true
	m.mu.Unlock()
	if !cut {
		m.fail(errCreditOverrun)
		if m.onCutOff != nil {
			m.onCutOff()
		}
	}
}

// errCreditOverrun fails a connection whose peer took a receive of the
// shared queue that was posted for another connection. It matches
// ring.ErrCreditOverrun (and so rnet's ErrProtocol), as the engine's own
// check does.
var errCreditOverrun error = &ring.ProtocolError{Check: ring.ErrCreditOverrun,
	Detail: "its messages took receives of the shared queue posted for other connections; cut off"}
