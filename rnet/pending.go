package rnet

import (
	"container/list"
	"os"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"
	"github.com/rnet-dev/rnet/internal/ring"
)

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
// never exceeds the bound. When no handshake is that stale, the request
// waits in line for the next slot to free or turn stale, in the order the
// requests came, holding its id, the event channel (one fd) it was moved to
// and a goroutine, but no registered memory; with maxWaiting of them in
// line already it is refused as busy at once. Nobody waits in the
// acceptor, which goes on reading requests.
type pendingHandshakes struct {
	slots      int
	maxWaiting int
	staleAfter time.Duration // the least stale age

	mu lockcount.Mutex
	// Under mu; every method holds it for constant work, or, in
	// evictStale, for at most one eviction per slot.
	free     int
	awaiting list.List   // *pendingSlot whose reply is out, oldest reply first
	waiting  list.List   // *pendingSlot in line for a slot, oldest first
	timer    *time.Timer // runs evictStale when the oldest reply turns stale with requests in line
	closed   bool
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
	inLine    *list.Element // in p.waiting while in line
	cancel    func()        // ends the wait for RTU
	evicted   bool          // a newer request took the slot
	heir      *pendingSlot  // the request the slot passes to on release
	abandoned bool          // released before the slot was its own
	released  bool
}

// lineSlotsPerSlot bounds the line of requests waiting for a slot, with
// the Accept backlog: each holds an fd, so the line must not grow with
// Backlog alone toward the process's file limit.
const lineSlotsPerSlot = 4

func newPendingHandshakes(slots, maxWaiting int, staleAfter time.Duration) *pendingHandshakes {
	return &pendingHandshakes{slots: slots, maxWaiting: maxWaiting, staleAfter: staleAfter, free: slots}
}

// close stops the eviction timer: the listener is closing, and its
// handshakes end with it.
func (p *pendingHandshakes) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
}

// take returns a slot for a new request: a free one, or that of the oldest
// handshake past the stale age, which it cancels, or a place in line; the
// slot is the request's own once wait returns true. With maxWaiting
// requests in line already it returns errHandshakesBusy at once, and a
// dialer refused as busy tries again, as a TCP client resends a SYN.
func (p *pendingHandshakes) take() (*pendingSlot, error) {
	p.mu.Lock()
	s := &pendingSlot{p: p, ready: make(chan struct{})}
	if p.waiting.Len() == 0 {
		// Nobody is in line before this request.
		if p.free > 0 {
			p.free--
			pendingSlotsTaken.Add(1)
			p.mu.Unlock()
			s.own = true
			close(s.ready)
			return s, nil
		}
		if cancel := p.evictForLocked(s); cancel != nil {
			p.mu.Unlock()
			cancel()
			return s, nil
		}
	}
	if p.waiting.Len() >= p.maxWaiting {
		p.mu.Unlock()
		return nil, errHandshakesBusy
	}
	s.inLine = p.waiting.PushBack(s)
	p.armLocked()
	p.mu.Unlock()
	return s, nil
}

// evictForLocked evicts the handshake that has waited longest for its RTU,
// if that wait is stale, for heir, and returns the evicted one's cancel;
// nil if none is stale.
func (p *pendingHandshakes) evictForLocked(heir *pendingSlot) (cancel func()) {
	e := p.awaiting.Front()
	if e == nil {
		return nil
	}
	old := e.Value.(*pendingSlot)
	if time.Since(old.repliedAt) < p.staleAgeLocked() {
		return nil
	}
	p.awaiting.Remove(e)
	old.elem = nil
	old.evicted = true
	old.heir = heir
	return old.cancel
}

// armLocked sets the timer for when the oldest reply turns stale, if
// requests wait in line for a slot.
func (p *pendingHandshakes) armLocked() {
	e := p.awaiting.Front()
	if p.closed || p.waiting.Len() == 0 || e == nil {
		return
	}
	wait := p.staleAgeLocked() - time.Since(e.Value.(*pendingSlot).repliedAt)
	if p.timer == nil {
		p.timer = time.AfterFunc(wait, p.evictStale)
	} else {
		p.timer.Reset(wait)
	}
}

// evictStale gives the requests in line, in order, the slots of the
// handshakes whose wait for an RTU has turned stale.
func (p *pendingHandshakes) evictStale() {
	var cancels []func()
	p.mu.Lock()
	for p.waiting.Len() > 0 {
		heir := p.waiting.Front().Value.(*pendingSlot)
		cancel := p.evictForLocked(heir)
		if cancel == nil {
			break
		}
		p.waiting.Remove(heir.inLine)
		heir.inLine = nil
		cancels = append(cancels, cancel)
	}
	p.armLocked()
	p.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
}

// passLocked passes a slot given back to the next request in line, or
// frees it.
func (p *pendingHandshakes) passLocked() {
	if e := p.waiting.Front(); e != nil {
		next := e.Value.(*pendingSlot)
		p.waiting.Remove(e)
		next.inLine = nil
		next.own = true
		close(next.ready)
		return
	}
	p.free++
	pendingSlotsTaken.Add(-1)
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

// wait waits until the slot is s's own (at once, unless the request is in
// line or its slot was taken from an evicted handshake still releasing its
// resources). It returns false if done is closed first.
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
	if p.awaiting.Len() == 1 {
		p.armLocked()
	}
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
	if s.inLine != nil {
		// Gave up in line: it never had a slot.
		p.waiting.Remove(s.inLine)
		s.inLine = nil
		return
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
	p.passLocked()
}

// What a connection end pins, and the listener bound that follows from it.

// pinnedPerConn is the most memory one connection end registers, and so
// pins, with both rings at their maximum: each region rounded up to whole
// pages, as it is mapped and registered. (A ring that moves holds its old
// region a little longer; an idle connection pins much less, see
// pinnedIdle.)
func pinnedPerConn(l ring.Layout) int {
	return pages(l.MaxSendRegion) + pages(l.MaxRecvRegion) + pages(l.TargetRegion)
}

// pinnedIdle is what a connection end pins with both rings at their idle
// size.
func pinnedIdle(l ring.Layout) int {
	return pages(l.SendRegion) + pages(l.RecvRegion) + pages(l.TargetRegion)
}

func pages(n int) int {
	page := os.Getpagesize()
	return (n + page - 1) / page * page
}

// pendingMemory is what the handshakes a listener has in progress may pin
// by default: half of a common 8 MiB RLIMIT_MEMLOCK. A handshake pins a
// connection end's idle rings until its dialer confirms it.
const pendingMemory = 4 << 20

// defaultMaxPending is ListenConfig.MaxPendingHandshakes's default for
// connections set up from cfg: as many handshakes as pendingMemory holds
// at their idle size, and no fewer than minDefaultPending. An iWARP
// connection starts with its whole receive ring (its messages need
// buffers of their own), so unless the listener is on a RoCE or
// InfiniBand device alone (notIWARP), the iWARP size counts: 102 with the
// default Config on RoCE, 26 otherwise.
func defaultMaxPending(cfg ring.Config, notIWARP bool) int {
	cfg.IWARP = false
	idle := pinnedIdle(cfg.Layout())
	if !notIWARP {
		cfg.IWARP = true
		idle = max(idle, pinnedIdle(cfg.Layout()))
	}
	return max(pendingMemory/idle, minDefaultPending)
}

// minDefaultPending keeps a listener whose connections start large able to
// set up a few at once.
const minDefaultPending = 16

// stalledHandshakeAfter is how long a handshake's dialer has at least to
// confirm our reply before a newer request may take its slot.
const stalledHandshakeAfter = time.Second
