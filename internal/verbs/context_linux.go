//go:build cgo

package verbs

/*
#cgo LDFLAGS: -libverbs
#include "shim.h"
#include <stdlib.h>
*/
import "C"

import (
	"syscall"
	"unsafe"

	"github.com/rnet-dev/rnet/internal/lockcount"
)

// Context is an open device (struct ibv_context). It is either opened here
// (Open) and closed by Close, or borrowed from librdmacm (WrapContext), whose
// devices librdmacm opens and closes itself; closing a borrowed Context only
// stops this Go value from being used.
type Context struct {
	mu    lockcount.RWMutex
	c     *C.struct_ibv_context
	name  string
	owned bool
}

// Open opens the device with the given name (as in DeviceInfo.Name).
func Open(name string) (*Context, error) {
	CountCgoCall()
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, deviceListError(err)
	}
	defer C.ibv_free_device_list(list)
	devs := unsafe.Slice(list, int(n))
	for _, d := range devs {
		if C.GoString(C.ibv_get_device_name(d)) != name {
			continue
		}
		CountCgoCall()
		c, err := C.ibv_open_device(d)
		if c == nil {
			return nil, &Error{Op: "ibv_open_device", Device: name, Errno: errnoOr(err, syscall.ENODEV)}
		}
		return &Context{c: c, name: name, owned: true}, nil
	}
	return nil, &Error{Op: "ibv_open_device", Device: name, Errno: syscall.ENODEV, Err: ErrNoDevice}
}

// WrapContext returns a borrowed Context for a struct ibv_context* owned by
// someone else, typically an rdma_cm_id's verbs field, so that PDs, CQs and
// MRs are made on the device the id is bound to.
func WrapContext(p unsafe.Pointer) (*Context, error) {
	if p == nil {
		return nil, &Error{Op: "WrapContext", Errno: syscall.EINVAL, Err: ErrNoDevice}
	}
	c := (*C.struct_ibv_context)(p)
	CountCgoCall()
	return &Context{c: c, name: C.GoString(C.rnet_device_name(c))}, nil
}

// Name is the device name, e.g. "rxe0".
func (ctx *Context) Name() string { return ctx.name }

// Ptr returns the struct ibv_context*, or nil after Close.
func (ctx *Context) Ptr() unsafe.Pointer {
	ctx.mu.RLock()
	defer ctx.mu.RUnlock()
	return unsafe.Pointer(ctx.c)
}

// Close closes an opened device; everything made on it must be closed first.
// It is idempotent.
func (ctx *Context) Close() error {
	ctx.mu.Lock()
	defer ctx.mu.Unlock()
	if ctx.c == nil {
		return nil
	}
	c := ctx.c
	ctx.c = nil
	if !ctx.owned {
		return nil
	}
	CountCgoCall()
	if r := C.ibv_close_device(c); r != 0 {
		return &Error{Op: "ibv_close_device", Device: ctx.name, Errno: syscall.Errno(-r)}
	}
	return nil
}

// Query describes the device (ports, limits, GIDs).
func (ctx *Context) Query() (DeviceInfo, error) {
	ctx.mu.RLock()
	defer ctx.mu.RUnlock()
	if ctx.c == nil {
		return DeviceInfo{}, ctx.closedErr("ibv_query_device")
	}
	return queryDevice(ctx.c, ctx.name)
}

func (ctx *Context) closedErr(op string) error {
	return &Error{Op: op, Device: ctx.name, Err: errClosed}
}
