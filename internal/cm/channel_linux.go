//go:build cgo

package cm

/*
#cgo LDFLAGS: -lrdmacm -libverbs
#include "shim.h"
*/
import "C"

import (
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// EventChannel is an rdma_cm event channel.
type EventChannel struct {
	c    *C.struct_rdma_event_channel
	poll *verbs.PollFD

	mu    lockcount.Mutex
	ids   int                // live IDs on the channel; it is destroyed only when none remain; under mu
	state verbs.ChannelClose // under mu
}

// NewEventChannel creates an event channel. Without an RDMA device it fails
// with an error matching ErrNoDevice.
func NewEventChannel() (*EventChannel, error) {
	verbs.CountCgoCall()
	c, err := C.rdma_create_event_channel()
	if c == nil {
		e := &Error{Op: "rdma_create_event_channel", Errno: errnoOr(err, syscall.ENODEV)}
		switch e.Errno {
		case syscall.ENODEV, syscall.ENOENT, syscall.ENOSYS, syscall.ENXIO:
			e.Err = ErrNoDevice
		}
		return nil, e
	}
	p, perr := verbs.NewPollFD(int(C.rnet_channel_fd(c)), "rdma_cm event channel")
	if perr != nil {
		verbs.CountCgoCall()
		C.rdma_destroy_event_channel(c)
		return nil, perr
	}
	return &EventChannel{c: c, poll: p}, nil
}

// SetDeadline sets the deadline for Next; the zero time means none. A past
// deadline wakes a waiting goroutine.
func (ch *EventChannel) SetDeadline(t time.Time) error {
	if err := ch.poll.SetDeadline(t); err != nil {
		return &Error{Op: "SetDeadline", Err: err}
	}
	return nil
}

// Close wakes waiters (they get net.ErrClosed). The C channel is destroyed
// once the last ID on it is closed (librdmacm requires that). It is
// idempotent.
func (ch *EventChannel) Close() error {
	return ch.state.Close(&ch.mu, ch.poll, ch.destroyIfUnusedLocked)
}

// addID counts a new ID on the channel, unless the channel is closed.
func (ch *EventChannel) addID() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.state.Closed() {
		return false
	}
	ch.ids++
	return true
}

func (ch *EventChannel) removeID() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.ids--
	ch.destroyIfUnusedLocked()
}

// destroyIfUnusedLocked destroys the C channel once it is closed, unwaited
// and without IDs. librdmacm reports no error from it.
func (ch *EventChannel) destroyIfUnusedLocked() error {
	if ch.state.WaitersGone() && ch.ids == 0 && ch.c != nil {
		// The PollFD owns the fd, which every id on the channel wrote its
		// commands to: librdmacm must not close it too.
		ch.c.fd = -1
		ch.poll.Close()
		verbs.CountCgoCall()
		C.rdma_destroy_event_channel(ch.c)
		ch.c = nil
	}
	return nil
}

func errnoOr(err error, def syscall.Errno) syscall.Errno {
	if e, ok := err.(syscall.Errno); ok && e != 0 {
		return e
	}
	return def
}
