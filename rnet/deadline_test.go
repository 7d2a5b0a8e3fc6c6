package rnet

import (
	"runtime"
	"testing"
	"time"
)

// TestDeadlineStopWaitsForFiringTimer: stop must not forget a timer whose
// callback is already running (Stop reports false), or a later set would
// reuse or close the channel that callback is about to close: a double
// close, which panics in the timer's goroutine. Close calls stop while a
// SetDeadline may call set. The race is hit by chance, at offsets around
// the timer's expiry, so a pass on broken code is possible; on this code a
// panic is not.
func TestDeadlineStopWaitsForFiringTimer(t *testing.T) {
	for i := range 20000 {
		d := newDeadline(func() {})
		at := time.Now().Add(time.Duration(1+i%20) * time.Microsecond)
		d.set(at)
		for time.Now().Before(at) {
			runtime.Gosched() // stop as the timer fires
		}
		d.stop()
		if i%2 == 0 {
			d.set(time.Unix(1, 0)) // in the past: closes the channel now
		} else {
			d.set(time.Now().Add(time.Microsecond))
		}
		d.stop()
	}
}
