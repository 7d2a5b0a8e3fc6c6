//go:build linux

package verbs

import (
	"github.com/rnet-dev/rnet/internal/lockcount"
)

// ChannelClose is the close of a C channel object whose fd a PollFD owns
// (a completion channel, an rdma_cm event channel). The library must not
// destroy the object while objects made on it remain (CQs, ids), nor while
// a waiter's try function still reads it; so Close wakes the waiters at
// once, and the object goes when the last of these ends. Its fields are
// guarded by the owner's mutex, the one Close is given.
type ChannelClose struct {
	closed      bool // Close has begun: nothing new may be made on the channel
	waitersGone bool // PollFD.Shutdown has returned: no try function still runs
}

// Closed reports whether Close has begun. The owner's mutex must be held.
func (c *ChannelClose) Closed() bool { return c.closed }

// WaitersGone reports whether no waiter can read the object any more, so
// that it may be destroyed once nothing made on it remains. The owner's
// mutex must be held.
func (c *ChannelClose) WaitersGone() bool { return c.waitersGone }

// Close marks the channel closed under mu, wakes poll's waiters and waits
// until none runs, then, under mu again, calls destroyIfUnused, which
// destroys the object if nothing made on it remains (else the last one's
// close does). It holds mu only around the marks: a waiter's try function
// or a closing CQ or id may take it meanwhile. A second Close returns nil.
func (c *ChannelClose) Close(mu *lockcount.Mutex, poll *PollFD, destroyIfUnused func() error) error {
	mu.Lock()
	if c.closed {
		mu.Unlock()
		return nil
	}
	c.closed = true
	mu.Unlock()
	poll.Shutdown()
	mu.Lock()
	defer mu.Unlock()
	c.waitersGone = true
	return destroyIfUnused()
}
