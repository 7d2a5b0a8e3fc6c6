package rnet

import (
	"container/list"
	"errors"
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// errHandshakesBusy is what a listener tells its HandshakeError hook when
// it refuses a request because every pending-handshake slot is held by a
// handshake too young to give up.
var errHandshakesBusy = errors.New("rnet: every pending-handshake slot is held by a handshake whose dialer may still confirm it (ListenConfig.MaxPendingHandshakes)")

// pendingHandshakes bounds the connection requests a listener is working
// on: each takes a slot when the acceptor reads it and gives it back once
// its connection is established (before it waits for Accept) or has
// failed. A slot is what pins a connection's registered memory before its
// dialer has proved itself, so the bound is the listener's bound on that
// memory.
//
// When every slot is taken, a new request takes the slot of the handshake
// that has waited longest for its dialer's last message (RTU), provided
// that wait has passed the stale age (see staleAgeLocked): a live dialer
// answers within a round trip, so such a handshake is most likely one that
// will never complete. The evicted handshake is cancelled, and its slot
// passes to the new one once it has released its resources, so memory
// never exceeds the bound. When no handshake is that stale, the request is
// refused as busy at once rather than kept waiting.
type pendingHandshakes struct {
	slots      int
	staleAfter time.Duration // the least stale age

	mu sync.Mutex
	// Under mu; every method holds it for constant work.
	free     int
	awaiting list.List // *pendingSlot whose reply is out, oldest reply first
	// slowRTU is the longest recent wait for an RTU that came: the
	// longest wait so far, decaying by a eighth with each handshake
	// established since.
	slowRTU time.Duration
}

// A dialer whose process is busy (a burst of its own dials, say) takes
// longer than a round trip to answer, and the acceptor learns by how much
// from the RTUs that do come: a handshake is stale only once it has waited
// staleRTUFactor times the slowest recent one, and never before staleAfter
// or after staleAfterMaxFactor times it, so that dialers which answer late
// on purpose cannot slow the eviction of stalled requests by more.
const (
	staleRTUFactor      = 4
	staleAfterMaxFactor = 10
)

// staleAgeLocked is how long a handshake must have waited for its RTU
// before a newer request may take its slot.
func (p *pendingHandshakes) staleAgeLocked() time.Duration {
	return min(max(staleRTUFactor*p.slowRTU, p.staleAfter), staleAfterMaxFactor*p.staleAfter)
}

// pendingSlot is one request's hold on a pendingHandshakes slot.
type pendingSlot struct {
	p     *pendingHandshakes
	ready chan struct{} // closed once the slot is this request's own

	// Under p.mu:
	own       bool          // ready is closed
	repliedAt time.Time     // when the reply went out
	elem      *list.Element // in p.awaiting while evictable
	cancel    func()        // ends the wait for RTU
	evicted   bool          // a newer request took the slot
	heir      *pendingSlot  // the request the slot passes to on release
	abandoned bool          // released before the slot was its own
	released  bool
}

func newPendingHandshakes(slots int, staleAfter time.Duration) *pendingHandshakes {
	return &pendingHandshakes{slots: slots, staleAfter: staleAfter, free: slots}
}

// take returns a slot for a new request: a free one, or that of the oldest
// handshake past the stale age, which it cancels; the slot is the request's
// own once wait returns true. With neither it returns errHandshakesBusy at
// once: the acceptor must go on reading requests, and a dialer refused as
// busy tries again, as a TCP client resends a SYN. Its work under p.mu is
// constant.
func (p *pendingHandshakes) take() (*pendingSlot, error) {
	p.mu.Lock()
	if p.free > 0 {
		p.free--
		p.mu.Unlock()
		s := &pendingSlot{p: p, ready: make(chan struct{}), own: true}
		close(s.ready)
		return s, nil
	}
	e := p.awaiting.Front()
	if e == nil {
		p.mu.Unlock()
		return nil, errHandshakesBusy
	}
	old := e.Value.(*pendingSlot)
	if time.Since(old.repliedAt) < p.staleAgeLocked() {
		p.mu.Unlock()
		return nil, errHandshakesBusy
	}
	p.awaiting.Remove(e)
	old.elem = nil
	old.evicted = true
	s := &pendingSlot{p: p, ready: make(chan struct{})}
	old.heir = s
	cancel := old.cancel
	p.mu.Unlock()
	cancel()
	return s, nil
}

// admit decides, for the acceptor, whether a connection request whose
// private data is private gets a pending-handshake slot, or is refused and
// why. It never waits, so that the acceptor reads every request as it comes.
func (l *listener) admit(p *pendingHandshakes, private []byte) (*pendingSlot, error) {
	// rsocket refuses a request whose private data it cannot use; so do
	// we, before it may take a slot or any memory.
	if _, err := ring.DecodeConnData(private); err != nil {
		return nil, err
	}
	// Accept is not keeping up: refuse, as a full TCP accept queue would,
	// rather than evict a handshake for a connection that could not be
	// queued.
	if l.backlogFull() {
		return nil, errBacklogFull
	}
	slot, err := p.take()
	if err != nil {
		return nil, err
	}
	// Checked again with the slot held, so that the connections waiting
	// for room in the backlog never outnumber the slots.
	if l.backlogFull() {
		slot.release()
		return nil, errBacklogFull
	}
	return slot, nil
}

// inUse is the number of slots taken.
func (p *pendingHandshakes) inUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slots - p.free
}

// wait waits until the slot is s's own (at once, unless it was taken from
// an evicted handshake still releasing its resources). It returns false if
// done is closed first.
func (s *pendingSlot) wait(done <-chan struct{}) bool {
	select {
	case <-s.ready:
		return true
	case <-done:
		return false
	}
}

// replied records that the reply went out: from now on the handshake may
// be evicted, by calling cancel.
func (s *pendingSlot) replied(cancel func()) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.released || s.evicted {
		return
	}
	s.repliedAt = time.Now()
	s.cancel = cancel
	s.elem = p.awaiting.PushBack(s)
}

// established takes the handshake off the evictable list now that its
// wait for the RTU has ended, and, if the RTU came (rtu), learns from how
// long it took: a request that never completes must not slow eviction
// down. It returns false if it was evicted first: the caller then drops
// the connection, since its slot is promised to another.
func (s *pendingSlot) established(rtu bool) bool {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.elem != nil {
		p.awaiting.Remove(s.elem)
		s.elem = nil
	}
	if s.evicted {
		return false
	}
	if rtu && !s.repliedAt.IsZero() {
		p.slowRTU = max(time.Since(s.repliedAt), p.slowRTU-p.slowRTU/8)
	}
	return true
}

// release gives the slot back, or on to the request that evicted this one.
// Call it once the handshake's resources are released or handed to a Conn.
func (s *pendingSlot) release() {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.released {
		return
	}
	s.released = true
	if s.elem != nil {
		p.awaiting.Remove(s.elem)
		s.elem = nil
	}
	if !s.own {
		// Its predecessor still holds the slot; the slot comes back
		// when the predecessor releases it.
		s.abandoned = true
		return
	}
	if h := s.heir; h != nil && !h.abandoned {
		h.own = true
		close(h.ready)
		return
	}
	p.free++
}
