package rnet

import (
	"testing"
	"time"
)

// The adaptive spin follows short waits, stays at BusyPoll for long ones,
// and never spins when busy polling is off.
func TestSpinWindow(t *testing.T) {
	c := &Conn{set: (&Config{}).settings()}
	var w waitEstimate
	if got := c.spinWindow(&w); got != 10*time.Microsecond {
		t.Fatalf("no history: window %v, want BusyPoll's 10µs", got)
	}
	limit := c.set.busyPollLimit
	for range 64 {
		w.observe(100*time.Microsecond, limit)
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
		w.observe(d, limit)
	}
	if got := c.spinWindow(&w); got < 200*time.Microsecond || got > limit {
		t.Fatalf("mostly 100µs waits, some 5ms: window %v, want 200µs..%v", got, limit)
	}
	for range 64 {
		w.observe(5*time.Millisecond, limit)
	}
	if got := c.spinWindow(&w); got != 10*time.Microsecond {
		t.Fatalf("waits of 5ms (past the 250µs limit): window %v, want BusyPoll's 10µs", got)
	}

	off := &Conn{set: (&Config{BusyPoll: -1}).settings()}
	var short waitEstimate
	for range 64 {
		short.observe(50*time.Microsecond, limit)
	}
	if got := off.spinWindow(&short); got != 0 {
		t.Fatalf("BusyPoll off: window %v, want 0", got)
	}
	fixed := &Conn{set: (&Config{BusyPollLimit: -1}).settings()}
	if got := fixed.spinWindow(&short); got != 10*time.Microsecond {
		t.Fatalf("BusyPollLimit off: window %v, want BusyPoll's 10µs", got)
	}
}
