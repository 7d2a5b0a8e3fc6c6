//go:build cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"os"
	"syscall"
	"unsafe"

	"github.com/rnet-dev/rnet/internal/lockcount"
)

// MR is a registered memory region over its own anonymous mmap (see
// mapMemory). The memory is outside the Go heap, so the GC never moves or
// frees it while the device may read or write it; Close releases it, after
// deregistration, to be unmapped or given to another region.
type MR struct {
	mu     lockcount.RWMutex
	c      *C.struct_ibv_mr
	mem    []byte // what the caller asked for
	mapped []byte // the whole mapping
	access Access
	lkey   uint32
	rkey   uint32
	dev    string
}

// RegisterMR maps size bytes (rounded up to whole pages, zeroed) and
// registers them with the given access. Nothing is granted implicitly: pass
// exactly the flags the region needs. Remote write requires LocalWrite (a
// verbs rule), so it is added when RemoteWrite is asked for. Remote read is
// granted only when asked for explicitly. A registration the locked-memory
// limit refused fails with an error matching ErrLockedMemory (and the errno,
// ENOMEM) whose *LockedMemoryError names the limit.
func (pd *PD) RegisterMR(size int, access Access) (*MR, error) {
	if size <= 0 {
		return nil, &Error{Op: "ibv_reg_mr", Device: pd.ctx.name, Errno: syscall.EINVAL}
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 {
		access |= AccessLocalWrite
	}
	page := os.Getpagesize()
	mem, err := mapMemory((size + page - 1) / page * page)
	if err != nil {
		return nil, &Error{Op: "mmap", Device: pd.ctx.name, Errno: errnoOf(err)}
	}
	pd.mu.RLock()
	defer pd.mu.RUnlock()
	if pd.c == nil {
		unmapMemory(mem)
		return nil, &Error{Op: "ibv_reg_mr", Device: pd.ctx.name, Err: errClosed}
	}
	CountCgoCall()
	c, cerr := C.ibv_reg_mr(pd.c, unsafe.Pointer(&mem[0]), C.size_t(len(mem)), C.int(access))
	if c == nil {
		unmapMemory(mem)
		errno := errnoOr(cerr, syscall.ENOMEM)
		e := &Error{Op: "ibv_reg_mr", Device: pd.ctx.name, Errno: errno}
		if cause := lockedMemoryCause(errno, len(mem)); cause != nil {
			e.Err = cause
		}
		return nil, e
	}
	held.mrs.Add(1)
	held.registeredBytes.Add(int64(len(mem)))
	return &MR{c: c, mem: mem[:size:size], mapped: mem, access: access, lkey: uint32(c.lkey), rkey: uint32(c.rkey), dev: pd.ctx.name}, nil
}

// Bytes is the registered memory; nil after Close. Do not keep it past Close:
// the memory is then unmapped, or another region's.
func (mr *MR) Bytes() []byte {
	mr.mu.RLock()
	defer mr.mu.RUnlock()
	return mr.mem
}

// Addr is the address of the first byte, for SGEs and for the peer's
// RemoteAddr.
func (mr *MR) Addr() uint64 {
	mr.mu.RLock()
	defer mr.mu.RUnlock()
	if mr.mem == nil {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&mr.mem[0])))
}

// Len is the registered length asked for.
func (mr *MR) Len() int {
	mr.mu.RLock()
	defer mr.mu.RUnlock()
	return len(mr.mem)
}

// LKey is the local key, for SGEs.
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey is the remote key, which a peer needs to write here.
func (mr *MR) RKey() uint32 { return mr.rkey }

// Access is the set of flags the region was registered with.
func (mr *MR) Access() Access { return mr.access }

// Deregister ends the registration and keeps the memory: its keys stop
// working at the device, and Bytes stays readable until Close. A queue
// pair whose path failed gives its device back this way while the bytes it
// holds for a resume stay. It is idempotent.
func (mr *MR) Deregister() error {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.deregisterLocked()
}

func (mr *MR) deregisterLocked() error {
	if mr.c == nil {
		return nil
	}
	CountCgoCall()
	if r, err := C.ibv_dereg_mr(mr.c); r != 0 {
		return &Error{Op: "ibv_dereg_mr", Device: mr.dev, Errno: retErrno(r, err)}
	}
	mr.c = nil
	held.mrs.Add(-1)
	held.registeredBytes.Add(-int64(len(mr.mapped)))
	return nil
}

// Close deregisters the region, if Deregister has not, and releases its
// memory (see ringmem_linux.go). It is idempotent.
func (mr *MR) Close() error {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if err := mr.deregisterLocked(); err != nil {
		return err
	}
	if mr.mapped == nil {
		return nil
	}
	err := unmapMemory(mr.mapped)
	mr.mem, mr.mapped = nil, nil
	if err != nil {
		return &Error{Op: "munmap", Device: mr.dev, Errno: errnoOf(err)}
	}
	return nil
}
