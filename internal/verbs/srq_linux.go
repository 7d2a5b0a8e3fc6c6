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

	"github.com/rnet-dev/rnet/internal/wr"
)

// SRQ is a shared receive queue: receives posted once, consumed by whichever
// QP created on it (cm's CreateQPOnSRQ) receives a message first. Its
// completions go to the receiving QP's receive CQ, with that QP's number.
type SRQ struct {
	mu   lockcount.RWMutex // read-held by the posting calls, write-held by Close
	c    *C.struct_ibv_srq
	caps SRQCaps
	dev  string
}

// NewSRQ creates a shared receive queue in the protection domain with room
// for caps.MaxWR receives of up to caps.MaxSGE SGEs each; the device may
// grant more (SRQ.Caps). The device's limits are in DeviceInfo.MaxSRQWR and
// MaxSRQSGE.
func (pd *PD) NewSRQ(caps SRQCaps) (*SRQ, error) {
	pd.mu.RLock()
	defer pd.mu.RUnlock()
	if pd.c == nil {
		return nil, &Error{Op: "ibv_create_srq", Device: pd.ctx.name, Err: errClosed}
	}
	attr := C.struct_ibv_srq_attr{max_wr: C.uint32_t(caps.MaxWR), max_sge: C.uint32_t(caps.MaxSGE)}
	CountCgoCall()
	c, err := C.rnet_create_srq(pd.c, &attr)
	if c == nil {
		return nil, &Error{Op: "ibv_create_srq", Device: pd.ctx.name, Errno: errnoOr(err, syscall.ENOMEM)}
	}
	held.srqs.Add(1)
	held.srqDepth.Add(int64(attr.max_wr))
	return &SRQ{
		c:    c,
		caps: SRQCaps{MaxWR: uint32(attr.max_wr), MaxSGE: uint32(attr.max_sge)},
		dev:  pd.ctx.name,
	}, nil
}

// Caps is what the device granted at creation.
func (s *SRQ) Caps() SRQCaps { return s.caps }

// Device is the name of the device the SRQ is on.
func (s *SRQ) Device() string { return s.dev }

// Ptr returns the struct ibv_srq*, or nil after Close.
func (s *SRQ) Ptr() unsafe.Pointer {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return unsafe.Pointer(s.c)
}

// PostRecv posts receive work requests like QP.PostRecv: chains of up to
// MaxBatch per crossing into C, without allocating. It returns how many were
// posted; on failure the first unposted one is wrs[n].
func (s *SRQ) PostRecv(wrs []wr.Recv) (n int, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.c == nil {
		return 0, &Error{Op: "ibv_post_srq_recv", Device: s.dev, Err: errClosed}
	}
	for n < len(wrs) {
		k := min(len(wrs)-n, MaxBatch)
		CountCgoCall()
		r := C.rnet_post_srq_recv(handle(unsafe.Pointer(s.c)), (*C.struct_rnet_recv_wr)(unsafe.Pointer(&wrs[n])), C.int(k))
		if r != 0 {
			errno, bad := errnoFromPost(r)
			return n + bad, &Error{Op: "ibv_post_srq_recv", Device: s.dev, Errno: errno}
		}
		n += k
	}
	return n, nil
}

// SetLimit arms the SRQ's limit: once fewer than limit receives are left on
// it, the device reports EventSRQLimitReached on its context's asynchronous
// events (Context.NextAsyncEvent), once, and the limit drops back to 0 until
// armed again. 0 disarms it. siw refuses a limit above the granted MaxWR.
func (s *SRQ) SetLimit(limit uint32) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.c == nil {
		return &Error{Op: "ibv_modify_srq", Device: s.dev, Err: errClosed}
	}
	CountCgoCall()
	if r, err := C.rnet_set_srq_limit(s.c, C.uint32_t(limit)); r != 0 {
		return &Error{Op: "ibv_modify_srq", Device: s.dev, Errno: retErrno(r, err)}
	}
	return nil
}

// Limit queries the SRQ's current limit: what SetLimit armed, or 0 once the
// limit event has fired.
func (s *SRQ) Limit() (uint32, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.c == nil {
		return 0, &Error{Op: "ibv_query_srq", Device: s.dev, Err: errClosed}
	}
	var attr C.struct_ibv_srq_attr
	CountCgoCall()
	if r, err := C.ibv_query_srq(s.c, &attr); r != 0 {
		return 0, &Error{Op: "ibv_query_srq", Device: s.dev, Errno: retErrno(r, err)}
	}
	return uint32(attr.srq_limit), nil
}

// Close destroys the SRQ. The QPs created on it must be destroyed first
// (else EBUSY, and the SRQ stays usable). It is idempotent; posts after it
// fail with an error wrapping net.ErrClosed.
func (s *SRQ) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil {
		return nil
	}
	CountCgoCall()
	if r, err := C.ibv_destroy_srq(s.c); r != 0 {
		return &Error{Op: "ibv_destroy_srq", Device: s.dev, Errno: retErrno(r, err)}
	}
	s.c = nil
	held.srqs.Add(-1)
	held.srqDepth.Add(-int64(s.caps.MaxWR))
	return nil
}

// IsFor reports whether the event is about srq.
func (e AsyncEvent) IsFor(srq *SRQ) bool {
	return e.srq != 0 && e.srq == uintptr(srq.Ptr())
}
