//go:build cgo

package cm

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// Waiting for events: EventChannel.Next reads the next event of a channel,
// and ID.Await and ID.Resolve wait for the events of an id alone on its
// channel.

// Next waits, parked in the netpoller, for the next event on the channel and
// returns it, already acknowledged. Events for IDs that were closed in the
// meantime are dropped.
//
// Next fails with os.ErrDeadlineExceeded after SetDeadline's deadline, with
// ctx's error when ctx ends, and with net.ErrClosed when the channel is
// closed, also from another goroutine during the wait.
func (ch *EventChannel) Next(ctx context.Context) (Event, error) {
	for {
		var (
			ev    C.struct_rnet_cm_event
			errno C.int
		)
		err := ch.poll.Wait(ctx, func() bool {
			// ch.c is destroyed only after PollFD.Shutdown (WaitersGone), which waits
			// for running callbacks.
			verbs.CountCgoCall()
			errno = C.rnet_get_cm_event(ch.c, &ev)
			return errno != C.EAGAIN
		})
		if err != nil {
			return Event{}, &Error{Op: "rdma_get_cm_event", Err: err}
		}
		if errno != 0 {
			return Event{}, &Error{Op: "rdma_get_cm_event", Errno: syscall.Errno(errno)}
		}
		if e, ok := ch.convert(&ev); ok {
			return e, nil
		}
	}
}

func (ch *EventChannel) convert(ev *C.struct_rnet_cm_event) (Event, bool) {
	e := Event{Type: EventType(ev._type), Status: int(ev.status)}
	p := &ev.param
	e.Param = ConnParam{
		ResponderResources: uint8(p.responder_resources),
		InitiatorDepth:     uint8(p.initiator_depth),
		FlowControl:        uint8(p.flow_control),
		RetryCount:         uint8(p.retry_count),
		RNRRetryCount:      uint8(p.rnr_retry_count),
		SRQ:                uint8(p.srq),
		QPNum:              uint32(p.qp_num),
	}
	if n := int(p.private_data_len); n > 0 {
		e.Param.PrivateData = C.GoBytes(unsafePointer(&p.private_data[0]), C.int(n))
	}
	if e.Type == EventConnectRequest {
		e.Listener = lookup(uintptr(ev.listen_handle))
		if e.Listener == nil {
			// Its listener is gone; nobody will accept this one.
			verbs.CountCgoCall()
			C.rdma_reject(ev.id, nil, 0)
			verbs.CountCgoCall()
			C.rdma_destroy_id(ev.id)
			return e, false
		}
		id, err := ch.adopt(ev.id)
		if err != nil {
			return e, false
		}
		id.mu.Lock()
		id.request = e.Param.PrivateData
		id.mu.Unlock()
		e.ID = id
	} else {
		e.ID = lookup(uintptr(ev.id_handle))
		if e.ID == nil {
			return e, false
		}
	}
	e.Addr = e.ID.addrString()
	return e, true
}

// Resolve resolves dst's address and then the route to it, waiting for each
// step's event. A step that times out is retried as r says. The id must be
// alone on its channel (the usual case on the active side), since Resolve
// consumes the channel's events.
func (id *ID) Resolve(ctx context.Context, src netip.Addr, dst netip.AddrPort, r Retry) error {
	err := id.resolveStep(ctx, r, "rdma_resolve_addr", EventAddrResolved, func(to time.Duration) error {
		return id.ResolveAddr(src, dst, to)
	})
	if err != nil {
		return err
	}
	return id.resolveStep(ctx, r, "rdma_resolve_route", EventRouteResolved, id.ResolveRoute)
}

func (id *ID) resolveStep(ctx context.Context, r Retry, op string, want EventType, start func(time.Duration) error) error {
	to := r.Timeout
	for try := 1; ; try++ {
		if err := start(to); err != nil {
			return err
		}
		ev, err := id.await(ctx, want, op)
		if err == nil {
			return nil
		}
		if try >= r.Tries || ev.Type != want+1 || !errors.Is(err, syscall.ETIMEDOUT) {
			// (ADDR_ERROR and ROUTE_ERROR follow their success events.)
			return err
		}
		to = min(2*to, time.Hour) // doubling, never overflowing
	}
}

// Await waits for the next event on the id's channel, which must be for this
// id, and returns it. An error event (REJECTED, UNREACHABLE, ...) is returned
// with its Err; any other event than want is returned with an error saying
// so. Like Resolve, it needs the id to be alone on its channel.
func (id *ID) Await(ctx context.Context, want EventType) (Event, error) {
	return id.await(ctx, want, "rdma_get_cm_event")
}

func (id *ID) await(ctx context.Context, want EventType, op string) (Event, error) {
	id.mu.RLock()
	ch := id.ch
	id.mu.RUnlock()
	ev, err := ch.Next(ctx)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			id.mu.RLock()
			e.Op, e.Addr = op, id.addrStringLocked()
			id.mu.RUnlock()
		}
		return ev, err
	}
	if ev.ID != id {
		return ev, &Error{Op: op, Addr: ev.Addr, Err: fmt.Errorf("rdma: event %v is for another id on the channel", ev.Type)}
	}
	if ev.Type == want {
		return ev, nil
	}
	if ev.Type == EventConnectResponse && want == EventEstablished {
		// The reply to a request made with a QP of rnet's own: as
		// librdmacm does for an attached one, make it ready, send the
		// RTU and report the connection established.
		id.mu.RLock()
		own := id.own != nil
		id.mu.RUnlock()
		if own {
			if ev.Status != 0 {
				return ev, &Error{Op: "rdma_connect", Addr: ev.Addr, Errno: statusErrno(ev.Status), Err: errConnectError}
			}
			if err := id.establishOwn(ev.Param.PrivateData); err != nil {
				return ev, err
			}
			ev.Type = EventEstablished
			return ev, nil
		}
	}
	if err := ev.Err(); err != nil {
		return ev, err
	}
	return ev, &Error{Op: op, Addr: ev.Addr, Err: fmt.Errorf("rdma: got event %v (status %d), want %v", ev.Type, ev.Status, want)}
}
