//go:build cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"syscall"
	"time"
)

// NextAsyncEvent waits up to timeout for the next of the device's
// asynchronous events (a QP gone fatal, an SRQ below its limit, a port
// down), reads it and acknowledges it. With none in time it fails with
// ETIMEDOUT. It blocks its thread in poll(2) meanwhile, so it suits one
// watching goroutine per device; the events belong to the device context,
// and a second reader would take some of them.
func (ctx *Context) NextAsyncEvent(timeout time.Duration) (AsyncEvent, error) {
	ctx.mu.RLock()
	defer ctx.mu.RUnlock()
	if ctx.c == nil {
		return AsyncEvent{}, ctx.closedErr("ibv_get_async_event")
	}
	ms := int((min(max(timeout, 0), time.Duration(1<<31-1)*time.Millisecond) + time.Millisecond - 1) / time.Millisecond)
	CountCgoCall()
	ev := C.rnet_next_async_event(ctx.c, C.int(ms))
	if ev.err != 0 {
		return AsyncEvent{}, &Error{Op: "ibv_get_async_event", Device: ctx.name, Errno: syscall.Errno(ev.err)}
	}
	return AsyncEvent{
		Type:  AsyncEventType(ev._type),
		QPNum: uint32(ev.qp_num),
		Port:  int(ev.port),
		srq:   uintptr(ev.srq),
	}, nil
}
