//go:build cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"syscall"
	"unsafe"
)

// The C mirrors in shim.h must match wr.go exactly: these index expressions
// fail to compile unless each Go size and offset equals the C one.
var (
	_ = [1]int{}[unsafe.Sizeof(SendWR{})-C.RNET_SIZEOF_SEND_WR]
	_ = [1]int{}[unsafe.Offsetof(SendWR{}.Op)-C.RNET_OFF_SEND_OP]
	_ = [1]int{}[unsafe.Offsetof(SendWR{}.Imm)-C.RNET_OFF_SEND_IMM]
	_ = [1]int{}[unsafe.Offsetof(SendWR{}.Inline)-C.RNET_OFF_SEND_INLINE]
	_ = [1]int{}[unsafe.Offsetof(SendWR{}.Signaled)-C.RNET_OFF_SEND_SIGNALED]
	_ = [1]int{}[unsafe.Offsetof(SendWR{}.SGE)-C.RNET_OFF_SEND_SGE]
	_ = [1]int{}[unsafe.Offsetof(SendWR{}.NumSGE)-C.RNET_OFF_SEND_NUM_SGE]
	_ = [1]int{}[unsafe.Offsetof(SendWR{}.RemoteAddr)-C.RNET_OFF_SEND_REMOTE_ADDR]
	_ = [1]int{}[unsafe.Offsetof(SendWR{}.RKey)-C.RNET_OFF_SEND_RKEY]
	_ = [1]int{}[unsafe.Sizeof(SGE{})-C.RNET_SIZEOF_SGE]
	_ = [1]int{}[unsafe.Offsetof(SGE{}.Length)-C.RNET_OFF_SGE_LENGTH]
	_ = [1]int{}[unsafe.Offsetof(SGE{}.LKey)-C.RNET_OFF_SGE_LKEY]
	_ = [1]int{}[unsafe.Sizeof(RecvWR{})-C.RNET_SIZEOF_RECV_WR]
	_ = [1]int{}[unsafe.Offsetof(RecvWR{}.SGE)-C.RNET_OFF_RECV_SGE]
	_ = [1]int{}[unsafe.Offsetof(RecvWR{}.NumSGE)-C.RNET_OFF_RECV_NUM_SGE]
	_ = [1]int{}[unsafe.Sizeof(Completion{})-C.RNET_SIZEOF_WC]
	_ = [1]int{}[unsafe.Offsetof(Completion{}.Status)-C.RNET_OFF_WC_STATUS]
	_ = [1]int{}[unsafe.Offsetof(Completion{}.Opcode)-C.RNET_OFF_WC_OPCODE]
	_ = [1]int{}[unsafe.Offsetof(Completion{}.Imm)-C.RNET_OFF_WC_IMM]
	_ = [1]int{}[unsafe.Offsetof(Completion{}.ByteLen)-C.RNET_OFF_WC_BYTE_LEN]
	_ = [1]int{}[unsafe.Offsetof(Completion{}.VendorErr)-C.RNET_OFF_WC_VENDOR_ERR]
	_ = [1]int{}[MaxBatch-C.RNET_MAX_BATCH]
	_ = [1]int{}[C.RNET_MAX_BATCH-MaxBatch]
)

// handle passes a verbs object (C memory) to the shim's hot-path functions
// as an integer, which cgo does not check for Go pointers (see shim.h).
func handle(p unsafe.Pointer) C.uintptr_t { return C.uintptr_t(uintptr(p)) }

// PostSend posts the work requests in order, as chains of up to MaxBatch
// per crossing, and returns how many were posted. On failure the first
// unposted one is wrs[n]; those before it are on the send queue.
func (qp *QP) PostSend(wrs []SendWR) (n int, err error) {
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

// PostRecv posts receive work requests like PostSend posts sends.
func (qp *QP) PostRecv(wrs []RecvWR) (n int, err error) {
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

// PostAndPoll posts recvs, then sends, then polls cq for up to len(out)
// completions, and returns how many it moved: a connection's usual step, in
// one crossing into C when each list fits in MaxBatch (longer lists are
// posted ahead in batches). On failure the error names the step that
// failed; nothing after it was done, and some WRs of a failed post may be on
// the queue.
func (qp *QP) PostAndPoll(cq *CQ, recvs []RecvWR, sends []SendWR, out []Completion) (int, error) {
	return qp.postAndPoll(cq, 0, recvs, sends, out, 1)
}

// PostAndPollTries is PostAndPoll that, while the CQ is empty, polls it
// again, up to tries polls in all, still in one crossing: a busy-polling
// caller pays one crossing per tries empty polls instead of one each. The
// tries are counted, not timed, so the crossing stays short on any device.
func (qp *QP) PostAndPollTries(cq *CQ, recvs []RecvWR, sends []SendWR, out []Completion, tries int) (int, error) {
	return qp.postAndPoll(cq, 0, recvs, sends, out, max(tries, 1))
}

// ArmPostAndPoll is PostAndPoll for a caller about to wait on cq's
// completion channel: in the same crossing it first arms cq (ReqNotify for
// every completion), so that a completion that lands after the poll still
// produces an event. The arm costs no crossing of its own.
func (qp *QP) ArmPostAndPoll(cq *CQ, recvs []RecvWR, sends []SendWR, out []Completion) (int, error) {
	return qp.postAndPoll(cq, C.RNET_ARM, recvs, sends, out, 1)
}

// TakeEventPostAndPoll is PostAndPoll for a caller that CompChannel.WaitReady
// woke: in the same crossing it first takes one event off cq's channel, if
// there is one, and acknowledges it. Unlike CompChannel.Wait it cannot tell
// which CQ an event came from, so cq must be the only CQ on its channel
// (ErrSharedChannel otherwise). Finding no event is not an error: the
// wakeup was a deadline's, or spurious.
func (qp *QP) TakeEventPostAndPoll(cq *CQ, recvs []RecvWR, sends []SendWR, out []Completion) (int, error) {
	if cq.ch == nil || !cq.ch.sole.Load() {
		return 0, &Error{Op: "ibv_get_cq_event", Device: cq.dev, Err: ErrSharedChannel}
	}
	return qp.postAndPoll(cq, C.RNET_TAKE_EVENT, recvs, sends, out, 1)
}

// TakeEventArmPostAndPoll is TakeEventPostAndPoll that arms cq again right
// after taking the event, in the same crossing and before it polls. A caller
// that takes every event this way keeps cq armed for good: any completion
// after its last poll has then left an event on the channel, so it can
// wait again (WaitReady) without first crossing to arm and poll.
func (qp *QP) TakeEventArmPostAndPoll(cq *CQ, recvs []RecvWR, sends []SendWR, out []Completion) (int, error) {
	if cq.ch == nil || !cq.ch.sole.Load() {
		return 0, &Error{Op: "ibv_get_cq_event", Device: cq.dev, Err: ErrSharedChannel}
	}
	return qp.postAndPoll(cq, C.RNET_TAKE_EVENT|C.RNET_ARM, recvs, sends, out, 1)
}

func (qp *QP) postAndPoll(cq *CQ, flags C.int, recvs []RecvWR, sends []SendWR, out []Completion, tries int) (int, error) {
	if len(recvs) > MaxBatch {
		if _, err := qp.PostRecv(recvs[:len(recvs)-MaxBatch]); err != nil {
			return 0, err
		}
		recvs = recvs[len(recvs)-MaxBatch:]
	}
	if len(sends) > MaxBatch {
		if _, err := qp.PostSend(sends[:len(sends)-MaxBatch]); err != nil {
			return 0, err
		}
		sends = sends[len(sends)-MaxBatch:]
	}
	// No defers: with this many returns the compiler cannot open-code
	// them, and the deferred calls cost more than the rest of the Go side
	// of a crossing (deferprocStack, deferreturn: 3% of a polling
	// connection's profile). Nothing between the locks can panic.
	qp.mu.RLock()
	cq.mu.RLock()
	n, err := qp.postPollLocked(cq, flags, recvs, sends, out, tries)
	cq.mu.RUnlock()
	qp.mu.RUnlock()
	return n, err
}

func (qp *QP) postPollLocked(cq *CQ, flags C.int, recvs []RecvWR, sends []SendWR, out []Completion, tries int) (int, error) {
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
	if flags&C.RNET_TAKE_EVENT != 0 {
		// cq.ch.c outlives cq.c, which is live under cq.mu: the channel
		// is destroyed only once its last CQ is.
		ch = handle(unsafe.Pointer(cq.ch.c))
	}
	CountCgoCall()
	r := int64(C.rnet_post_poll(handle(unsafe.Pointer(qp.c)), handle(unsafe.Pointer(cq.c)), ch, flags, rp, C.int(len(recvs)), sp, C.int(len(sends)), wp, C.int(min(len(out), 1<<30)), C.int(min(tries, 1<<30))))
	if r >= 0 {
		return int(r), nil
	}
	r = -r
	stage, code := r>>40, C.int(r&(1<<40-1))
	switch stage {
	case 1:
		errno, _ := errnoFromPost(code)
		return 0, &Error{Op: "ibv_post_recv", Device: qp.dev, Errno: errno}
	case 2:
		errno, _ := errnoFromPost(code)
		return 0, &Error{Op: "ibv_post_send", Device: qp.dev, Errno: errno}
	case 3:
		return 0, pollError(cq.dev, int(code>>8))
	case 5:
		return 0, &Error{Op: "ibv_get_cq_event", Device: cq.dev, Errno: syscall.Errno(code >> 8)}
	default:
		return 0, &Error{Op: "ibv_req_notify_cq", Device: cq.dev, Errno: syscall.Errno(code >> 8)}
	}
}
