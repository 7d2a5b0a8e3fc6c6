//go:build linux && cgo

package rnet

import (
	"testing"
	"time"
)

// TestEventRetryBacksOff: a failing event loop waits 5 ms, then twice as
// long each time up to 1 s, and starts over once an event came through; a
// closed done ends each wait at once.
func TestEventRetryBacksOff(t *testing.T) {
	done := make(chan struct{})
	close(done)
	var r eventRetry
	for _, want := range []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000} {
		r.wait(done)
		if r.delay != want*time.Millisecond {
			t.Fatalf("delay %v, want %v", r.delay, want*time.Millisecond)
		}
	}
	r.reset()
	r.wait(done)
	if r.delay != 5*time.Millisecond {
		t.Fatalf("delay after reset %v", r.delay)
	}
}
