package stream

import (
	"testing"
	"time"
)

// firingTimer is a timer caught firing: Stop reports false, and its
// callback has been handed to a goroutine of its own that has not run yet,
// as when time.AfterFunc's timer expires just before Stop.
type firingTimer struct{ f func() }

func (ft *firingTimer) Stop() bool {
	go ft.f()
	return false
}

// TestDeadlineWaitsForFiringTimer: stop (Close) and set (SetDeadline) must
// not forget a timer whose callback is already on its way, or a later set
// would reuse or close the channel that callback is about to close: a
// double close, which panics in the timer's goroutine. Both wait until the
// callback has closed its channel. (Its wakeup may come a moment later; a
// late kick is only a spurious wakeup.)
func TestDeadlineWaitsForFiringTimer(t *testing.T) {
	for _, op := range []struct {
		name string
		do   func(d *Deadline)
	}{
		{"stop", func(d *Deadline) { d.Stop() }},
		{"set", func(d *Deadline) { d.Set(time.Time{}) }},
		{"set again", func(d *Deadline) { d.Set(time.Now().Add(time.Hour)) }},
	} {
		t.Run(op.name, func(t *testing.T) {
			d := NewDeadline(func() {})
			d.afterFunc = func(_ time.Duration, f func()) stopper { return &firingTimer{f} }
			d.Set(time.Now().Add(time.Hour))
			first := d.Wait()
			op.do(d)
			if !isClosed(first) {
				t.Fatalf("%s returned before the firing timer's callback ran", op.name)
			}
			d.afterFunc = afterFunc
			d.Set(time.Unix(1, 0)) // in the past: closes the current channel itself
			if !isClosed(d.Wait()) {
				t.Fatal("a past deadline left the channel open")
			}
			d.Stop()
		})
	}
}
