package stream

import (
	"sync/atomic"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"
)

// Deadline is a settable point in time whose passing closes a channel, so a
// goroutine parked in select wakes when a deadline set from another goroutine
// passes, as with *net.TCPConn.
type Deadline struct {
	// expired is called when the deadline passes, to wake a goroutine
	// parked somewhere a channel cannot reach (the completion channel).
	expired func()

	// afterFunc is time.AfterFunc; tests replace it to fire timers when
	// they choose.
	afterFunc func(time.Duration, func()) stopper

	// mu serialises Set and Stop; Wait takes no lock, as every Read and
	// Write calls it.
	mu     lockcount.Mutex
	timer  stopper                       // under mu
	cancel atomic.Pointer[chan struct{}] // closed once the deadline has passed; replaced under mu
}

// stopper is the part of *time.Timer that deadline uses.
type stopper interface{ Stop() bool }

func NewDeadline(expired func()) *Deadline {
	d := &Deadline{expired: expired, afterFunc: afterFunc}
	d.renew()
	return d
}

// renew gives the deadline a new channel, not closed. Called with mu held,
// or before the Deadline is shared.
func (d *Deadline) renew() {
	ch := make(chan struct{})
	d.cancel.Store(&ch)
}

func afterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

// Set arms the deadline; the zero time disarms it.
func (d *Deadline) Set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.Wait() // the timer fired and closed it; wait for that before replacing
	}
	d.timer = nil
	closed := isClosed(d.Wait())
	if t.IsZero() {
		if closed {
			d.renew()
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if closed {
			d.renew()
		}
		cancel := *d.cancel.Load()
		expired := d.expired
		d.timer = d.afterFunc(dur, func() {
			close(cancel)
			expired()
		})
		return
	}
	if !closed {
		close(*d.cancel.Load())
		d.expired()
	}
}

// Wait returns the channel that is closed when the deadline passes.
func (d *Deadline) Wait() <-chan struct{} { return *d.cancel.Load() }

// Stop disarms the deadline for good (Close). A timer already firing is
// waited for, as in Set: forgotten, it would close a channel a later Set
// reuses or closes itself.
func (d *Deadline) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.Wait()
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
