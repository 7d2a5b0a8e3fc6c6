package rnet

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// closedDone is a done channel already closed: a wait given it returns at
// once with what it has, so a test can ask "would this wait?" without
// waiting.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func mustTake(t *testing.T, p *pendingHandshakes) *pendingSlot {
	t.Helper()
	s, err := p.take()
	if err != nil {
		t.Fatalf("take: %v", err)
	}
	return s
}

// mustBeBusy checks that a new request finds no slot and is refused as busy.
func mustBeBusy(t *testing.T, p *pendingHandshakes, why string) {
	t.Helper()
	if s, err := p.take(); !errors.Is(err, errHandshakesBusy) {
		if s != nil {
			s.release()
		}
		t.Fatalf("take = %v, want errHandshakesBusy: %s", err, why)
	}
}

// isOwn says whether the slot is s's own now, without waiting.
func isOwn(s *pendingSlot) bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// counter counts the calls of the cancel funcs it hands out.
type counter struct{ n atomic.Int32 }

func (c *counter) cancel() { c.n.Add(1) }

func TestPendingFreeSlotsThenBusy(t *testing.T) {
	p := newPendingHandshakes(2, 0, time.Hour)
	a, b := mustTake(t, p), mustTake(t, p)
	if !isOwn(a) || !isOwn(b) {
		t.Fatal("a free slot is not at once the request's own")
	}
	mustBeBusy(t, p, "a third request got one of two slots while both handshakes are still being set up")
	if n := p.inUse(); n != 2 {
		t.Fatalf("inUse = %d, want 2", n)
	}
	a.release()
	if s := mustTake(t, p); !isOwn(s) {
		t.Fatal("the slot a failed handshake released is not the next request's own")
	}
	if n := p.inUse(); n != 2 {
		t.Fatalf("inUse = %d, want 2", n)
	}
}

func TestPendingYoungHandshakeIsNotEvicted(t *testing.T) {
	p := newPendingHandshakes(1, 0, time.Hour)
	var c counter
	a := mustTake(t, p)
	a.replied(c.cancel)
	mustBeBusy(t, p, "a request took the slot of a handshake that has waited less than staleAfter")
	if c.n.Load() != 0 {
		t.Fatal("a young handshake was cancelled")
	}
	if !a.established(true) {
		t.Fatal("a handshake nobody evicted could not be established")
	}
}

func TestPendingEvictsTheOldest(t *testing.T) {
	p := newPendingHandshakes(3, 0, 0)
	var ca, cb, cc counter
	a, b, c := mustTake(t, p), mustTake(t, p), mustTake(t, p)
	b.replied(cb.cancel)
	a.replied(ca.cancel)
	c.replied(cc.cancel)
	// b replied first: the longest wait, so the first to go.
	d := mustTake(t, p)
	if cb.n.Load() != 1 || ca.n.Load() != 0 || cc.n.Load() != 0 {
		t.Fatalf("cancelled a %d, b %d, c %d times; want b once", ca.n.Load(), cb.n.Load(), cc.n.Load())
	}
	if isOwn(d) {
		t.Fatal("the evicting request owns the slot before the evicted handshake released it")
	}
	if b.established(true) {
		t.Fatal("an evicted handshake that then got ESTABLISHED may keep the slot promised to another")
	}
	b.release()
	if !isOwn(d) {
		t.Fatal("the evicted handshake's release did not pass its slot on")
	}
	e := mustTake(t, p)
	if ca.n.Load() != 1 || isOwn(e) {
		t.Fatal("the next request did not evict the next oldest, a")
	}
	if n := p.inUse(); n != 3 {
		t.Fatalf("inUse = %d, want 3", n)
	}
}

func TestPendingEstablishedAndFailedAreNotEvicted(t *testing.T) {
	p := newPendingHandshakes(2, 0, 0)
	var ca, cb counter
	a, b := mustTake(t, p), mustTake(t, p)
	a.replied(ca.cancel)
	b.replied(cb.cancel)
	if !a.established(true) {
		t.Fatal("established = false for a handshake nobody evicted")
	}
	b.release() // failed: rejected, or timed out
	// a holds its slot until it releases it (after handing its Conn on),
	// but may no longer be evicted; b's slot is free.
	c := mustTake(t, p)
	if !isOwn(c) || ca.n.Load() != 0 || cb.n.Load() != 0 {
		t.Fatal("a request evicted an established or failed handshake instead of taking the free slot")
	}
	mustBeBusy(t, p, "a request evicted an established handshake")
	a.release()
	if n := p.inUse(); n != 1 {
		t.Fatalf("inUse = %d, want 1", n)
	}
}

func TestPendingAbandonedHeirFreesTheSlot(t *testing.T) {
	p := newPendingHandshakes(1, 0, 0)
	var c counter
	a := mustTake(t, p)
	a.replied(c.cancel)
	b := mustTake(t, p)
	// The listener closes: b gives up waiting for a to release.
	if b.wait(closedDone) {
		t.Fatal("b owns the slot before a released it")
	}
	b.release()
	a.release()
	if n := p.inUse(); n != 0 {
		t.Fatalf("inUse = %d after both released, want 0", n)
	}
	s := mustTake(t, p)
	if !isOwn(s) {
		t.Fatal("the freed slot is not a new request's own")
	}
}

func TestPendingEvictsOnceTheOldestIsStale(t *testing.T) {
	p := newPendingHandshakes(1, 0, time.Second)
	var c counter
	a := mustTake(t, p)
	a.replied(c.cancel)
	// With nothing free and a young, a new request is refused; once a
	// has waited staleAfter, the next one evicts it.
	mustBeBusy(t, p, "a request took the slot of a young handshake")
	a.repliedAt = a.repliedAt.Add(-time.Second)
	b := mustTake(t, p)
	if c.n.Load() != 1 {
		t.Fatalf("a cancelled %d times; want a evicted once stale", c.n.Load())
	}
	a.release()
	if !isOwn(b) {
		t.Fatal("the stale handshake's slot did not pass on")
	}
}

// TestPendingStaleAgeFollowsSlowRTUs checks that after a dialer's RTU took
// long (its process busy with a burst of dials), a handshake counts as
// stale only at four times that wait, up to ten times staleAfter, and that
// the stale age comes back down as quick RTUs follow.
func TestPendingStaleAgeFollowsSlowRTUs(t *testing.T) {
	p := newPendingHandshakes(1, 0, time.Second)
	// establishAfter completes a handshake whose RTU took wait.
	establishAfter := func(wait time.Duration) {
		t.Helper()
		s := mustTake(t, p)
		s.replied(func() {})
		s.repliedAt = s.repliedAt.Add(-wait)
		if !s.established(true) {
			t.Fatal("established = false for a handshake nobody evicted")
		}
		s.release()
	}
	// evicts reports whether a request evicts a handshake that has waited
	// age for its RTU.
	evicts := func(age time.Duration) bool {
		t.Helper()
		var c counter
		s := mustTake(t, p)
		s.replied(c.cancel)
		s.repliedAt = s.repliedAt.Add(-age)
		next, err := p.take()
		s.release()
		if err == nil {
			next.release()
		}
		return err == nil && c.n.Load() == 1
	}

	if !evicts(1100 * time.Millisecond) {
		t.Fatal("with no RTU seen yet, a handshake past staleAfter was not evicted")
	}
	establishAfter(800 * time.Millisecond)
	if evicts(3 * time.Second) {
		t.Fatal("after an RTU that took 0.8 s, a handshake was evicted at 3 s, before 4 times that")
	}
	if !evicts(3300 * time.Millisecond) {
		t.Fatal("after an RTU that took 0.8 s, a handshake was not evicted at 3.3 s, past 4 times that")
	}
	// A request whose wait ended without its RTU (timed out, rejected)
	// teaches nothing.
	s := mustTake(t, p)
	s.replied(func() {})
	s.repliedAt = s.repliedAt.Add(-time.Minute)
	s.established(false)
	s.release()
	if !evicts(3300 * time.Millisecond) {
		t.Fatal("a handshake that timed out without its RTU raised the stale age")
	}
	establishAfter(time.Minute)
	if !evicts(10*time.Second + 100*time.Millisecond) {
		t.Fatal("a dialer slow on purpose raised the stale age past ten times staleAfter")
	}
	for range 64 {
		establishAfter(time.Millisecond)
	}
	if !evicts(1100 * time.Millisecond) {
		t.Fatal("after many quick RTUs, a handshake past staleAfter was not evicted")
	}
}

// TestPendingNeverOverBound runs many requests through few slots, each
// handshake replying, failing or completing at random, with requests
// evicting stale ones or refused as busy, and checks that the handshakes
// owning a slot (and so pinning memory) never outnumber the slots.
func TestPendingNeverOverBound(t *testing.T) {
	for _, line := range []int{0, 8} {
		t.Run("Line"+strconv.Itoa(line), func(t *testing.T) { pendingNeverOverBound(t, line) })
	}
}

func pendingNeverOverBound(t *testing.T, line int) {
	const slots, requests = 4, 2000
	p := newPendingHandshakes(slots, line, 0)
	defer p.close()
	var owning, most atomic.Int32
	var wg sync.WaitGroup
	done := make(chan struct{})
	// progress is signalled after each change that may let a refused
	// request in: a reply (its handshake may now be evicted) or a release.
	progress := make(chan struct{}, 1)
	signal := func() {
		select {
		case progress <- struct{}{}:
		default:
		}
	}
	refused := 0
	for i := range requests {
		s, err := p.take()
		for errors.Is(err, errHandshakesBusy) {
			// Refused, as the acceptor refuses it; the dialer tries again.
			refused++
			<-progress
			s, err = p.take()
		}
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer signal()
			defer s.release()
			if !s.wait(done) {
				return
			}
			n := owning.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			defer owning.Add(-1)
			r := rand.New(rand.NewPCG(uint64(i), 1))
			if r.IntN(8) == 0 {
				return // failed in setup
			}
			cancelled := make(chan struct{})
			var once sync.Once
			s.replied(func() { once.Do(func() { close(cancelled) }) })
			signal()
			switch r.IntN(3) {
			case 0: // a real dialer: established, unless evicted first
				if s.established(true) {
					return
				}
			case 1: // stalled: waits until evicted, or the end
				select {
				case <-cancelled:
				case <-done:
				}
			}
		})
	}
	close(done)
	wg.Wait()
	t.Logf("%d requests admitted; %d tries refused as busy", requests, refused)
	if m := most.Load(); m > slots {
		t.Errorf("%d handshakes owned a slot at once, want at most %d", m, slots)
	}
	if n := p.inUse(); n != 0 {
		t.Errorf("inUse = %d after every handshake ended, want 0", n)
	}
}

func TestListenConfigLimits(t *testing.T) {
	for _, tc := range []struct {
		lc                  ListenConfig
		backlog, maxPending int
	}{
		{ListenConfig{}, 128, 0},
		{ListenConfig{Backlog: -1, MaxPendingHandshakes: -1}, 128, 0},
		{ListenConfig{Backlog: 4, MaxPendingHandshakes: 1}, 4, 1},
		{ListenConfig{Backlog: math.MaxInt, MaxPendingHandshakes: math.MaxInt}, 65535, 65535},
	} {
		b, p := tc.lc.limits()
		if b != tc.backlog || p != tc.maxPending {
			t.Errorf("Backlog %d, MaxPendingHandshakes %d: limits %d, %d; want %d, %d",
				tc.lc.Backlog, tc.lc.MaxPendingHandshakes, b, p, tc.backlog, tc.maxPending)
		}
	}
	// MaxPendingHandshakes's default: as many idle connections as pin 4 MiB.
	for _, tc := range []struct {
		cfg      *Config
		notIWARP bool
		want     int
	}{
		{nil, true, 4 << 20 / (40 << 10)},   // 40 KiB each on RoCE
		{nil, false, 4 << 20 / (156 << 10)}, // 156 KiB on iWARP, whose receive ring starts whole
		{&Config{IdleBufferSize: 1 << 20}, true, 16},
	} {
		if got := defaultMaxPending(tc.cfg.settings().ring, tc.notIWARP); got != tc.want {
			t.Errorf("default MaxPendingHandshakes with %+v, not iWARP %v: %d, want %d", tc.cfg, tc.notIWARP, got, tc.want)
		}
	}
	if d := (*Config)(nil).settings().handshakeTimeout; d != 10*time.Second {
		t.Errorf("default HandshakeTimeout %v, want 10s", d)
	}
}

// TestAcceptorRefusesBusyAtOnce: with every pending-handshake slot held by
// a handshake too young to give up (set up, or waiting for its RTU), the
// acceptor's admission of a new request refuses it as busy at once, with
// a reject that tells the dialer so; it never waits for a slot, so the
// acceptor goes on reading requests. A full backlog and an unusable
// request are refused as before.
func TestAcceptorRefusesBusyAtOnce(t *testing.T) {
	l := &listener{conns: make(chan *Conn, 1)}
	p := newPendingHandshakes(2, 1, time.Hour)
	data := ring.ConnData{Version: 1, Flags: ring.FlagIOMap, Credits: 16,
		TargetSGL: ring.RemoteSGE{Addr: 0x10000, Key: 7, Length: 2},
		DataBuf:   ring.RemoteSGE{Addr: 0x20000, Key: 7, Length: 1 << 16}}
	valid := data.Encode()
	admit := func() (*pendingSlot, error) {
		t.Helper()
		type result struct {
			s   *pendingSlot
			err error
		}
		done := make(chan result, 1)
		go func() {
			s, err := l.admit(p, valid[:])
			done <- result{s, err}
		}()
		select {
		case r := <-done:
			return r.s, r.err
		case <-time.After(10 * time.Second): // a hang detector only
			t.Fatal("the acceptor waits for a slot instead of refusing the request")
			return nil, nil
		}
	}
	settingUp, err := admit()
	if err != nil {
		t.Fatal(err)
	}
	replied, err := admit()
	if err != nil {
		t.Fatal(err)
	}
	var c counter
	replied.replied(c.cancel)
	inLine, err := admit()
	if err != nil || isOwn(inLine) {
		t.Fatalf("admit with every slot young and room in line = %v; want a place in line", err)
	}
	for range 3 {
		s, err := admit()
		if !errors.Is(err, errHandshakesBusy) || s != nil {
			t.Fatalf("admit with every slot young = %v, %v; want errHandshakesBusy", s, err)
		}
		if r := rejectReasonOf(err); !r.busy() {
			t.Errorf("the reject for %v says %v, not busy", err, r)
		}
	}
	if c.n.Load() != 0 || p.inUse() != 2 {
		t.Errorf("a refused request cancelled %d handshakes, %d slots in use; want 0 and 2", c.n.Load(), p.inUse())
	}
	if _, err := l.admit(p, []byte{1, 2}); !errors.Is(err, ErrProtocol) {
		t.Errorf("admit of an unusable request = %v, want ErrProtocol", err)
	}
	settingUp.release()
	if !isOwn(inLine) {
		t.Fatal("the slot a failed handshake released did not pass to the request in line")
	}
	l.conns <- nil // the backlog of one is full
	if _, err := l.admit(p, valid[:]); !errors.Is(err, errBacklogFull) {
		t.Errorf("admit with the backlog full = %v, want errBacklogFull", err)
	}
	<-l.conns
	inLine.release()
	s, err := admit()
	if err != nil || !isOwn(s) {
		t.Fatalf("admit with a slot freed = %v; want the slot", err)
	}
	s.release()
	replied.release()
}

// TestPendingLineIsFirstComeFirstServed: with every slot young, requests
// wait in line, up to maxWaiting, and get the slots that free in the order
// they came; a newcomer does not pass them; one that gives up leaves the
// line.
func TestPendingLineIsFirstComeFirstServed(t *testing.T) {
	p := newPendingHandshakes(1, 3, time.Hour)
	a := mustTake(t, p)
	b, c, d := mustTake(t, p), mustTake(t, p), mustTake(t, p)
	if isOwn(b) || isOwn(c) || isOwn(d) {
		t.Fatal("a request in line owns a slot")
	}
	mustBeBusy(t, p, "a fifth request found room in a line of three")
	c.release() // gave up: the listener closes, say
	a.release()
	if !isOwn(b) || isOwn(d) {
		t.Fatal("the freed slot did not go to the first in line")
	}
	e := mustTake(t, p)
	if isOwn(e) {
		t.Fatal("a newcomer passed the line")
	}
	b.release()
	if !isOwn(d) || isOwn(e) {
		t.Fatal("the next slot did not go to the next in line")
	}
	d.release()
	e.release()
	if n := p.inUse(); n != 0 {
		t.Fatalf("inUse = %d after every request ended, want 0", n)
	}
}

// TestPendingLineTakesStaleSlots: a request in line gets the slot of a
// handshake whose wait for its RTU turns stale, without another request
// coming to evict it.
func TestPendingLineTakesStaleSlots(t *testing.T) {
	p := newPendingHandshakes(1, 1, time.Millisecond)
	defer p.close()
	cancelled := make(chan struct{})
	a := mustTake(t, p)
	a.replied(func() { close(cancelled) })
	b := mustTake(t, p)
	select {
	case <-cancelled:
	case <-time.After(time.Minute): // a hang detector only
		t.Fatal("the stalled handshake was never evicted for the request in line")
	}
	if isOwn(b) || a.established(true) {
		t.Fatal("the slot passed before the evicted handshake released it")
	}
	a.release()
	if !isOwn(b) {
		t.Fatal("the evicted handshake's release did not pass its slot to the request in line")
	}
	b.release()
	if n := p.inUse(); n != 0 {
		t.Fatalf("inUse = %d, want 0", n)
	}
}
