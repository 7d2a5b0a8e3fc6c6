package rnet

import "time"

// eventRetry paces the retries of an event loop whose channel failed with
// something other than being closed (an errno from rdma_get_cm_event, such
// as ENOMEM): such a loop must neither spin on a failure that persists nor
// stop listening for good. The waits double from 5 ms to at most 1 s.
type eventRetry struct{ delay time.Duration }

// wait waits out the next delay, or until done is closed.
func (r *eventRetry) wait(done <-chan struct{}) {
	r.delay = min(max(2*r.delay, 5*time.Millisecond), time.Second)
	t := time.NewTimer(r.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-done:
	}
}

// reset starts over after an event came through.
func (r *eventRetry) reset() { r.delay = 0 }
