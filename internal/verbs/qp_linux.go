//go:build cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"unsafe"

	"github.com/rnet-dev/rnet/internal/lockcount"
)

// QP is a queue pair. rnet's QPs are created by librdmacm on a connection
// id (internal/cm), which owns the QP and is the one to destroy it; QP wraps
// it for posting, querying and moving it to the error state.
type QP struct {
	mu      lockcount.RWMutex // read-held by PostSend, PostRecv and the queries, write-held by Close; Step takes none
	c       *C.struct_ibv_qp
	num     uint32
	caps    QPCaps
	dev     string
	destroy func() error
	// srq, if not nil, is the shared receive queue the QP takes its
	// receives from: PostRecv and Step post there, as the QP has no
	// receive queue of its own. srqHandle is its struct ibv_srq *, which
	// Step may use without the SRQ's lock: an SRQ cannot be destroyed
	// while a QP on it exists (EBUSY), and Step is ordered before the
	// QP's Close.
	srq       *SRQ
	srqHandle C.uintptr_t
}

// WrapQP wraps a struct ibv_qp* created elsewhere. caps is what the device
// granted. destroy, called once by Close, destroys the C QP (for a cm id,
// rdma_destroy_qp); nil means ibv_destroy_qp.
func WrapQP(p unsafe.Pointer, caps QPCaps, destroy func() error) *QP {
	c := (*C.struct_ibv_qp)(p)
	CountCgoCall()
	held.qps.Add(1)
	return &QP{
		c:       c,
		num:     uint32(C.rnet_qp_num(c)),
		caps:    caps,
		dev:     C.GoString(C.rnet_device_name(c.context)),
		destroy: destroy,
	}
}

// WrapQPOnSRQ is WrapQP for a QP created on srq: its receives go to srq.
func WrapQPOnSRQ(p unsafe.Pointer, caps QPCaps, srq *SRQ, destroy func() error) *QP {
	qp := WrapQP(p, caps, destroy)
	if srq != nil {
		qp.srq, qp.srqHandle = srq, handle(srq.Ptr())
	}
	return qp
}

// SRQ is the shared receive queue the QP takes its receives from, or nil.
func (qp *QP) SRQ() *SRQ { return qp.srq }

// Num is the QP number.
func (qp *QP) Num() uint32 { return qp.num }

// Caps is what the device granted at creation.
func (qp *QP) Caps() QPCaps { return qp.caps }

// Ptr returns the struct ibv_qp*, or nil after Close.
func (qp *QP) Ptr() unsafe.Pointer {
	qp.mu.RLock()
	defer qp.mu.RUnlock()
	return unsafe.Pointer(qp.c)
}

// State queries the QP's current state.
func (qp *QP) State() (QPState, error) {
	qp.mu.RLock()
	defer qp.mu.RUnlock()
	if qp.c == nil {
		return QPUnknown, &Error{Op: "ibv_query_qp", Device: qp.dev, Err: errClosed}
	}
	var attr C.struct_ibv_qp_attr
	var init C.struct_ibv_qp_init_attr
	CountCgoCall()
	if r, err := C.ibv_query_qp(qp.c, &attr, C.IBV_QP_STATE, &init); r != 0 {
		return QPUnknown, &Error{Op: "ibv_query_qp", Device: qp.dev, Errno: retErrno(r, err)}
	}
	return QPState(attr.qp_state), nil
}

// Attrs queries the QP's state and its reliable-transport settings.
func (qp *QP) Attrs() (QPAttrs, error) {
	qp.mu.RLock()
	defer qp.mu.RUnlock()
	if qp.c == nil {
		return QPAttrs{}, &Error{Op: "ibv_query_qp", Device: qp.dev, Err: errClosed}
	}
	var attr C.struct_ibv_qp_attr
	var init C.struct_ibv_qp_init_attr
	mask := C.IBV_QP_STATE | C.IBV_QP_TIMEOUT | C.IBV_QP_RETRY_CNT | C.IBV_QP_RNR_RETRY | C.IBV_QP_MIN_RNR_TIMER
	CountCgoCall()
	if r, err := C.ibv_query_qp(qp.c, &attr, C.int(mask), &init); r != 0 {
		return QPAttrs{}, &Error{Op: "ibv_query_qp", Device: qp.dev, Errno: retErrno(r, err)}
	}
	return QPAttrs{
		State:       QPState(attr.qp_state),
		AckTimeout:  uint8(attr.timeout),
		RetryCount:  uint8(attr.retry_cnt),
		RNRRetry:    uint8(attr.rnr_retry),
		MinRNRTimer: uint8(attr.min_rnr_timer),
	}, nil
}

// Path queries the port and address vector the QP sends on, as the
// connection manager set them when it made the QP ready to receive.
func (qp *QP) Path() (QPPath, error) {
	qp.mu.RLock()
	defer qp.mu.RUnlock()
	if qp.c == nil {
		return QPPath{}, &Error{Op: "ibv_query_qp", Device: qp.dev, Err: errClosed}
	}
	var attr C.struct_ibv_qp_attr
	var init C.struct_ibv_qp_init_attr
	mask := C.IBV_QP_PORT | C.IBV_QP_PATH_MTU | C.IBV_QP_AV | C.IBV_QP_DEST_QPN
	CountCgoCall()
	if r, err := C.ibv_query_qp(qp.c, &attr, C.int(mask), &init); r != 0 {
		return QPPath{}, &Error{Op: "ibv_query_qp", Device: qp.dev, Errno: retErrno(r, err)}
	}
	return QPPath{
		Port:         int(attr.port_num),
		PathMTU:      mtuBytes(uint32(attr.path_mtu)),
		GIDIndex:     int(attr.ah_attr.grh.sgid_index),
		TrafficClass: uint8(attr.ah_attr.grh.traffic_class),
		HopLimit:     uint8(attr.ah_attr.grh.hop_limit),
		ServiceLevel: uint8(attr.ah_attr.sl),
		GlobalRoute:  attr.ah_attr.is_global != 0,
		DestQPNum:    uint32(attr.dest_qp_num),
	}, nil
}

// SetError moves the QP to the error state, which flushes every outstanding
// work request with IBV_WC_WR_FLUSH_ERR (rsocket does this on close).
func (qp *QP) SetError() error {
	qp.mu.RLock()
	defer qp.mu.RUnlock()
	if qp.c == nil {
		return &Error{Op: "ibv_modify_qp", Device: qp.dev, Err: errClosed}
	}
	var attr C.struct_ibv_qp_attr
	attr.qp_state = C.IBV_QPS_ERR
	CountCgoCall()
	if r, err := C.ibv_modify_qp(qp.c, &attr, C.IBV_QP_STATE); r != 0 {
		return &Error{Op: "ibv_modify_qp", Device: qp.dev, Errno: retErrno(r, err)}
	}
	return nil
}

// Close destroys the QP once; later calls, and posts after it, fail with an
// error wrapping net.ErrClosed.
func (qp *QP) Close() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.c == nil {
		return nil
	}
	if qp.destroy != nil {
		if err := qp.destroy(); err != nil {
			return err
		}
	} else {
		CountCgoCall()
		if r, err := C.ibv_destroy_qp(qp.c); r != 0 {
			return &Error{Op: "ibv_destroy_qp", Device: qp.dev, Errno: retErrno(r, err)}
		}
	}
	qp.c = nil
	held.qps.Add(-1)
	return nil
}
