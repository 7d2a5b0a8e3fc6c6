package rnet

import (
	"testing"
	"time"
)

// The adaptive spin follows short waits, stays at BusyPoll for long ones,
// and never spins when busy polling is off.
func TestSpinWindow(t *testing.T) {
	c := &Conn{set: (&Config{}).settings()}
	busy, limit := c.set.busyPoll, c.set.busyPollLimit
	var w waitEstimate
	if got := c.spinWindow(&w); got != busy {
		t.Fatalf("no history: window %v, want BusyPoll's %v", got, busy)
	}
	for range 64 {
		w.observe(100*time.Microsecond, c.spinWindow(&w), limit)
	}
	if got := c.spinWindow(&w); got < 190*time.Microsecond || got > 200*time.Microsecond {
		t.Fatalf("waits of 100µs: window %v, want about 200µs", got)
	}
	// One wait in eight parked (5 ms): the window must still cover the
	// short ones, or spinning collapses into parking.
	for i := range 64 {
		d := 100 * time.Microsecond
		if i%8 == 0 {
			d = 5 * time.Millisecond
		}
		w.observe(d, c.spinWindow(&w), limit)
	}
	if got := c.spinWindow(&w); got < 200*time.Microsecond || got > limit {
		t.Fatalf("mostly 100µs waits, some 5ms: window %v, want 200µs..%v", got, limit)
	}
	for range 64 {
		w.observe(5*time.Millisecond, c.spinWindow(&w), limit)
	}
	if got := c.spinWindow(&w); got != busy {
		t.Fatalf("waits of 5ms (past the %v limit): window %v, want BusyPoll's %v", limit, got, busy)
	}

	off := &Conn{set: (&Config{BusyPoll: -1}).settings()}
	var short waitEstimate
	for range 64 {
		short.observe(50*time.Microsecond, limit, limit)
	}
	if got := off.spinWindow(&short); got != 0 {
		t.Fatalf("BusyPoll off: window %v, want 0", got)
	}
	fixed := &Conn{set: (&Config{BusyPollLimit: -1}).settings()}
	for range 2 * probeEvery {
		if got := fixed.spinWindow(&w); got != busy {
			t.Fatalf("BusyPollLimit off: window %v, want BusyPoll's %v, and no probes", got, busy)
		}
	}
}

// A connection whose spinning went off after slow replies turns it back on
// when replies are quick again, although every wait of its own parks (and
// so lasts as long as a park, not as long as the reply took): every
// probeEvery-th wait spins the whole limit, and one that catches its reply
// restarts the average.
func TestSpinWindowRecovers(t *testing.T) {
	c := &Conn{set: (&Config{}).settings()}
	busy, limit := c.set.busyPoll, c.set.busyPollLimit
	var w waitEstimate
	for range 64 {
		w.observe(time.Millisecond, c.spinWindow(&w), limit)
	}
	if !w.spinOff(limit) {
		t.Fatalf("after 1ms waits spinning is still on (average %v)", w.avg)
	}
	// Replies are quick again, but every wait that spins only BusyPoll
	// parks and takes a park's 700µs; a probe catches the reply in 60µs.
	probes := 0
	for i := range 4 * probeEvery {
		window := c.spinWindow(&w)
		d := 700 * time.Microsecond
		switch {
		case window == limit:
			probes++
			d = 60 * time.Microsecond
		case window != busy:
			if window < 100*time.Microsecond || window > limit {
				t.Fatalf("wait %d after %d probe(s): window %v, want about 120µs", i, probes, window)
			}
			return // spinning is back
		}
		w.observe(d, window, limit)
	}
	t.Fatalf("spinning stayed off for %d waits with quick replies (%d probes, average %v)", 4*probeEvery, probes, w.avg)
}

// A probe whose reply did not come within the limit keeps spinning off,
// and the waits between probes spin only BusyPoll: a peer that stays slow
// costs one long spin per probeEvery waits.
func TestSpinWindowProbesStaySparse(t *testing.T) {
	c := &Conn{set: (&Config{}).settings()}
	busy, limit := c.set.busyPoll, c.set.busyPollLimit
	var w waitEstimate
	var probes []int
	for i := range 64 + 8*probeEvery {
		window := c.spinWindow(&w)
		if window == limit {
			probes = append(probes, i)
		} else if w.spinOff(limit) && window != busy {
			t.Fatalf("spinning off: window %v, want BusyPoll's %v or a probe's %v", window, busy, limit)
		}
		w.observe(2*time.Millisecond, window, limit)
	}
	if !w.spinOff(limit) {
		t.Fatalf("2ms waits turned spinning on (average %v)", w.avg)
	}
	// The gaps double from 1 to probeEvery, then stay there.
	for k := 1; k < len(probes); k++ {
		want := min(1<<(k-1), probeEvery)
		if gap := probes[k] - probes[k-1]; gap != want {
			t.Fatalf("probes at waits %v: gap %d after probe %d, want %d", probes, gap, k, want)
		}
	}
	if len(probes) < 8 {
		t.Fatalf("only %d probes in %d waits: %v", len(probes), 64+8*probeEvery, probes)
	}
}
