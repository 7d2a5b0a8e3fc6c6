package conntest

import (
	"testing"
	"time"
)

// TestUntilSleepsBetweenLooks: a wait for a condition that comes true
// later looks at it a few times, not in a loop that keeps a CPU busy. After
// the doubling pauses reach a millisecond, looks are at least that far
// apart (a timer never fires early), whatever the machine's speed.
func TestUntilSleepsBetweenLooks(t *testing.T) {
	done := make(chan struct{})
	time.AfterFunc(20*time.Millisecond, func() { close(done) })
	looks := 0
	start := time.Now()
	Until(t, "the timer", func() bool {
		looks++
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	elapsed := time.Since(start)
	// 4 µs doubled to 1 ms is nine pauses, then one look per millisecond,
	// and one look before the first pause.
	if most := 10 + int(elapsed/time.Millisecond) + 1; looks > most {
		t.Errorf("Until looked %d times in %v, want at most %d", looks, elapsed, most)
	}
}
