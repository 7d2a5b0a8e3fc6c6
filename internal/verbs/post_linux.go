//go:build cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"syscall"
	"unsafe"

	"github.com/rnet-dev/rnet/internal/wr"
)

// The C mirrors in shim.h must match internal/wr exactly: these index
// expressions fail to compile unless each Go size and offset equals the C one.
var (
	_ = [1]int{}[unsafe.Sizeof(wr.Send{})-C.RNET_SIZEOF_SEND_WR]
	_ = [1]int{}[unsafe.Offsetof(wr.Send{}.Op)-C.RNET_OFF_SEND_OP]
	_ = [1]int{}[unsafe.Offsetof(wr.Send{}.Imm)-C.RNET_OFF_SEND_IMM]
	_ = [1]int{}[unsafe.Offsetof(wr.Send{}.Inline)-C.RNET_OFF_SEND_INLINE]
	_ = [1]int{}[unsafe.Offsetof(wr.Send{}.Signaled)-C.RNET_OFF_SEND_SIGNALED]
	_ = [1]int{}[unsafe.Offsetof(wr.Send{}.SGE)-C.RNET_OFF_SEND_SGE]
	_ = [1]int{}[unsafe.Offsetof(wr.Send{}.NumSGE)-C.RNET_OFF_SEND_NUM_SGE]
	_ = [1]int{}[unsafe.Offsetof(wr.Send{}.RemoteAddr)-C.RNET_OFF_SEND_REMOTE_ADDR]
	_ = [1]int{}[unsafe.Offsetof(wr.Send{}.RKey)-C.RNET_OFF_SEND_RKEY]
	_ = [1]int{}[unsafe.Sizeof(wr.SGE{})-C.RNET_SIZEOF_SGE]
	_ = [1]int{}[unsafe.Offsetof(wr.SGE{}.Length)-C.RNET_OFF_SGE_LENGTH]
	_ = [1]int{}[unsafe.Offsetof(wr.SGE{}.LKey)-C.RNET_OFF_SGE_LKEY]
	_ = [1]int{}[unsafe.Sizeof(wr.Recv{})-C.RNET_SIZEOF_RECV_WR]
	_ = [1]int{}[unsafe.Offsetof(wr.Recv{}.SGE)-C.RNET_OFF_RECV_SGE]
	_ = [1]int{}[unsafe.Offsetof(wr.Recv{}.NumSGE)-C.RNET_OFF_RECV_NUM_SGE]
	_ = [1]int{}[unsafe.Sizeof(wr.Completion{})-C.RNET_SIZEOF_WC]
	_ = [1]int{}[unsafe.Offsetof(wr.Completion{}.Status)-C.RNET_OFF_WC_STATUS]
	_ = [1]int{}[unsafe.Offsetof(wr.Completion{}.Opcode)-C.RNET_OFF_WC_OPCODE]
	_ = [1]int{}[unsafe.Offsetof(wr.Completion{}.Imm)-C.RNET_OFF_WC_IMM]
	_ = [1]int{}[unsafe.Offsetof(wr.Completion{}.ByteLen)-C.RNET_OFF_WC_BYTE_LEN]
	_ = [1]int{}[unsafe.Offsetof(wr.Completion{}.VendorErr)-C.RNET_OFF_WC_VENDOR_ERR]
	_ = [1]int{}[unsafe.Offsetof(wr.Completion{}.QPNum)-C.RNET_OFF_WC_QP_NUM]
	_ = [1]int{}[StepArm-C.RNET_STEP_ARM]
	_ = [1]int{}[C.RNET_STEP_ARM-StepArm]
	_ = [1]int{}[StepTakeEvent-C.RNET_STEP_TAKE_EVENT]
	_ = [1]int{}[C.RNET_STEP_TAKE_EVENT-StepTakeEvent]
	_ = [1]int{}[MaxBatch-C.RNET_MAX_BATCH]
	_ = [1]int{}[C.RNET_MAX_BATCH-MaxBatch]
)

// handle passes a verbs object (C memory) to the shim's hot-path functions
// as an integer, which cgo does not check for Go pointers (see shim.h).
func handle(p unsafe.Pointer) C.uintptr_t { return C.uintptr_t(uintptr(p)) }

// PostSend posts the work requests in order, as chains of up to MaxBatch
// per crossing, and returns how many were posted. On failure the first
// unposted one is wrs[n]; those before it are on the send queue.
func (qp *QP) PostSend(wrs []wr.Send) (n int, err error) {
	qp.mu.RLock()
	defer qp.mu.RUnlock()
	if qp.c == nil {
		return 0, &Error{Op: "ibv_post_send", Device: qp.dev, Err: errClosed}
	}
	for n < len(wrs) {
		k := min(len(wrs)-n, MaxBatch)
		CountCgoCall()
		r := C.rnet_post_send(qp.c, (*C.struct_rnet_send_wr)(unsafe.Pointer(&wrs[n])), C.int(k))
		if r != 0 {
			errno, bad := errnoFromPost(r)
			return n + bad, &Error{Op: "ibv_post_send", Device: qp.dev, Errno: errno}
		}
		n += k
	}
	return n, nil
}

// PostRecv posts receive work requests like PostSend posts sends; on a QP
// created on an SRQ, it posts them to the SRQ.
func (qp *QP) PostRecv(wrs []wr.Recv) (n int, err error) {
	if qp.srq != nil {
		return qp.srq.PostRecv(wrs)
	}
	qp.mu.RLock()
	defer qp.mu.RUnlock()
	if qp.c == nil {
		return 0, &Error{Op: "ibv_post_recv", Device: qp.dev, Err: errClosed}
	}
	for n < len(wrs) {
		k := min(len(wrs)-n, MaxBatch)
		CountCgoCall()
		r := C.rnet_post_recv(qp.c, (*C.struct_rnet_recv_wr)(unsafe.Pointer(&wrs[n])), C.int(k))
		if r != 0 {
			errno, bad := errnoFromPost(r)
			return n + bad, &Error{Op: "ibv_post_recv", Device: qp.dev, Errno: errno}
		}
		n += k
	}
	return n, nil
}

// Step is a connection's whole turn at the device in one crossing into C:
// what flags ask for, then post recvs, then sends, then poll cq for up to
// len(out) completions, polling again while the CQ is empty up to tries
// polls in all (counted, not timed, so the crossing stays short on any
// device). It returns how many completions it moved into out.
//
// Every receive is posted before any send, also when the lists are longer
// than one crossing takes (they are then posted ahead, in batches, in
// stepPlan's order): a send may carry credits that only those receives
// back. On failure the error names the verb that failed; nothing after it
// was done, and some work requests of a failed post may be on the queue.
func (qp *QP) Step(cq *CQ, flags StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	if flags&StepTakeEvent != 0 && (cq.ch == nil || !cq.ch.sole.Load()) {
		return 0, &Error{Op: "ibv_get_cq_event", Device: cq.dev, Err: ErrSharedChannel}
	}
	aheadRecvs, aheadSends := stepPlan(len(recvs), len(sends))
	if aheadRecvs > 0 {
		if _, err := qp.PostRecv(recvs[:aheadRecvs]); err != nil {
			return 0, err
		}
		recvs = recvs[aheadRecvs:]
	}
	if aheadSends > 0 {
		if _, err := qp.PostSend(sends[:aheadSends]); err != nil {
			return 0, err
		}
		sends = sends[aheadSends:]
	}
	// No defers: with this many returns the compiler cannot open-code
	// them, and deferred calls cost more than the rest of the Go side of
	// a crossing. Nothing between the locks can panic.
	qp.mu.RLock()
	cq.mu.RLock()
	n, err := qp.stepLocked(cq, flags, recvs, sends, out, max(tries, 1))
	cq.mu.RUnlock()
	qp.mu.RUnlock()
	return n, err
}

func (qp *QP) stepLocked(cq *CQ, flags StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	if qp.c == nil {
		return 0, &Error{Op: "ibv_post_send", Device: qp.dev, Err: errClosed}
	}
	if cq.c == nil {
		return 0, &Error{Op: "ibv_poll_cq", Device: cq.dev, Err: errClosed}
	}
	var (
		rp *C.struct_rnet_recv_wr
		sp *C.struct_rnet_send_wr
		wp *C.struct_rnet_wc
	)
	if len(recvs) > 0 {
		rp = (*C.struct_rnet_recv_wr)(unsafe.Pointer(&recvs[0]))
	}
	if len(sends) > 0 {
		sp = (*C.struct_rnet_send_wr)(unsafe.Pointer(&sends[0]))
	}
	if len(out) > 0 {
		wp = (*C.struct_rnet_wc)(unsafe.Pointer(&out[0]))
	}
	var ch C.uintptr_t
	if flags&StepTakeEvent != 0 {
		// cq.ch.c outlives cq.c, which is live under cq.mu: the channel
		// is destroyed only once its last CQ is.
		ch = handle(unsafe.Pointer(cq.ch.c))
	}
	CountCgoCall()
	r := int64(C.rnet_step(handle(unsafe.Pointer(qp.c)), qp.srqHandle, handle(unsafe.Pointer(cq.c)), ch, C.int(flags), rp, C.int(len(recvs)), sp, C.int(len(sends)), wp, C.int(min(len(out), 1<<30)), C.int(min(tries, 1<<30))))
	if r >= 0 {
		return int(r), nil
	}
	return 0, stepError(-r, qp.dev, cq.dev)
}

// stepError turns rnet_step's negated return into the error of the stage
// that failed (see rnet_step in shim.h).
func stepError(r int64, qpDev, cqDev string) error {
	stage, code := r>>40, C.int(r&(1<<40-1))
	switch stage {
	case 1:
		errno, _ := errnoFromPost(code)
		return &Error{Op: "ibv_post_recv", Device: qpDev, Errno: errno}
	case 6:
		errno, _ := errnoFromPost(code)
		return &Error{Op: "ibv_post_srq_recv", Device: qpDev, Errno: errno}
	case 2:
		errno, _ := errnoFromPost(code)
		return &Error{Op: "ibv_post_send", Device: qpDev, Errno: errno}
	case 3:
		return pollError(cqDev, int(code>>8))
	case 5:
		return &Error{Op: "ibv_get_cq_event", Device: cqDev, Errno: syscall.Errno(code >> 8)}
	default:
		return &Error{Op: "ibv_req_notify_cq", Device: cqDev, Errno: syscall.Errno(code >> 8)}
	}
}

// Step is QP.Step for a CQ that many queue pairs share, without posting:
// what flags ask (StepTakeEvent needs cq to be the only CQ on its
// channel), then up to tries polls, in one crossing.
func (cq *CQ) Step(flags StepFlags, out []wr.Completion, tries int) (int, error) {
	if flags&StepTakeEvent != 0 && (cq.ch == nil || !cq.ch.sole.Load()) {
		return 0, &Error{Op: "ibv_get_cq_event", Device: cq.dev, Err: ErrSharedChannel}
	}
	cq.mu.RLock()
	defer cq.mu.RUnlock()
	if cq.c == nil {
		return 0, &Error{Op: "ibv_poll_cq", Device: cq.dev, Err: errClosed}
	}
	var wp *C.struct_rnet_wc
	if len(out) > 0 {
		wp = (*C.struct_rnet_wc)(unsafe.Pointer(&out[0]))
	}
	var ch C.uintptr_t
	if flags&StepTakeEvent != 0 {
		ch = handle(unsafe.Pointer(cq.ch.c))
	}
	CountCgoCall()
	r := int64(C.rnet_step(0, 0, handle(unsafe.Pointer(cq.c)), ch, C.int(flags), nil, 0, nil, 0, wp, C.int(min(len(out), 1<<30)), C.int(min(max(tries, 1), 1<<30))))
	if r >= 0 {
		return int(r), nil
	}
	return 0, stepError(-r, cq.dev, cq.dev)
}
