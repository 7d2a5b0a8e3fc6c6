package rnet

import (
	"sync"
	"time"
)

// deadline is a settable point in time whose passing closes a channel, so a
// goroutine parked in select wakes when a deadline set from another goroutine
// passes, as with *net.TCPConn.
type deadline struct {
	// expired is called when the deadline passes, to wake a goroutine
	// parked somewhere a channel cannot reach (the completion channel).
	expired func()

	// afterFunc is time.AfterFunc; tests replace it to fire timers when
	// they choose.
	afterFunc func(time.Duration, func()) stopper

	mu     sync.Mutex
	timer  stopper
	cancel chan struct{} // closed once the deadline has passed
}

// stopper is the part of *time.Timer that deadline uses.
type stopper interface{ Stop() bool }

func newDeadline(expired func()) deadline {
	return deadline{expired: expired, afterFunc: afterFunc, cancel: make(chan struct{})}
}

func afterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

// set arms the deadline; the zero time disarms it.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel // the timer fired and closed it; wait for that before replacing
	}
	d.timer = nil
	closed := isClosed(d.cancel)
	if t.IsZero() {
		if closed {
			d.cancel = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if closed {
			d.cancel = make(chan struct{})
		}
		cancel := d.cancel
		expired := d.expired
		d.timer = d.afterFunc(dur, func() {
			close(cancel)
			expired()
		})
		return
	}
	if !closed {
		close(d.cancel)
		d.expired()
	}
}

// wait returns the channel that is closed when the deadline passes.
func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel
}

// stop disarms the deadline for good (Close). A timer already firing is
// waited for, as in set: forgotten, it would close a channel a later set
// reuses or closes itself.
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel
	}
	d.timer = nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
