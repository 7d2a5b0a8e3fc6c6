//go:build cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"syscall"
	"unsafe"

	"github.com/rnet-dev/rnet/internal/lockcount"
)

// PD is a protection domain.
type PD struct {
	mu  lockcount.RWMutex
	c   *C.struct_ibv_pd
	ctx *Context
}

// AllocPD allocates a protection domain on the device.
func (ctx *Context) AllocPD() (*PD, error) {
	ctx.mu.RLock()
	defer ctx.mu.RUnlock()
	if ctx.c == nil {
		return nil, ctx.closedErr("ibv_alloc_pd")
	}
	CountCgoCall()
	c, err := C.ibv_alloc_pd(ctx.c)
	if c == nil {
		return nil, &Error{Op: "ibv_alloc_pd", Device: ctx.name, Errno: errnoOr(err, syscall.ENOMEM)}
	}
	return &PD{c: c, ctx: ctx}, nil
}

// Context is the device the PD belongs to.
func (pd *PD) Context() *Context { return pd.ctx }

// Ptr returns the struct ibv_pd*, or nil after Close.
func (pd *PD) Ptr() unsafe.Pointer {
	pd.mu.RLock()
	defer pd.mu.RUnlock()
	return unsafe.Pointer(pd.c)
}

// Close deallocates the PD. Its MRs and QPs must be gone first (else EBUSY,
// and the PD stays usable). It is idempotent.
func (pd *PD) Close() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.c == nil {
		return nil
	}
	CountCgoCall()
	if r, err := C.ibv_dealloc_pd(pd.c); r != 0 {
		return &Error{Op: "ibv_dealloc_pd", Device: pd.ctx.name, Errno: retErrno(r, err)}
	}
	pd.c = nil
	return nil
}
