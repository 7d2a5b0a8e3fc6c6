//go:build cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
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
	_ = [1]int{}[StepArmSend-C.RNET_STEP_ARM_SEND]
	_ = [1]int{}[C.RNET_STEP_ARM_SEND-StepArmSend]
	_ = [1]int{}[MaxBatch-C.RNET_MAX_BATCH]
	_ = [1]int{}[C.RNET_MAX_BATCH-MaxBatch]
)

// PostSend posts the work requests in order, as chains of up to MaxBatch
// per crossing, and returns how many were posted. On failure the first
// unposted one is wrs[n]; those before it are on the send queue.
func (qp *QP) PostSend(wrs []wr.Send) (n int, err error) {
	return qp.postChains("ibv_post_send", len(wrs), func(i, k int) C.int {
		return C.rnet_post_send(qp.c, (*C.struct_rnet_send_wr)(unsafe.Pointer(&wrs[i])), C.int(k))
	})
}

// PostRecv posts receive work requests like PostSend posts sends; on a QP
// created on an SRQ, it posts them to the SRQ.
func (qp *QP) PostRecv(wrs []wr.Recv) (n int, err error) {
	if qp.srq != nil {
		return qp.srq.PostRecv(wrs)
	}
	return qp.postChains("ibv_post_recv", len(wrs), func(i, k int) C.int {
		return C.rnet_post_recv(qp.c, (*C.struct_rnet_recv_wr)(unsafe.Pointer(&wrs[i])), C.int(k))
	})
}

// postChains posts n work requests with post, which posts wrs[i:i+k] as
// one chain in one crossing and returns rnet_post_send's result.
func (qp *QP) postChains(op string, n int, post func(i, k int) C.int) (posted int, err error) {
	qp.mu.RLock()
	defer qp.mu.RUnlock()
	if qp.c == nil {
		return 0, &Error{Op: op, Device: qp.dev, Err: errClosed}
	}
	for posted < n {
		k := min(n-posted, MaxBatch)
		CountCgoCall()
		if r := post(posted, k); r != 0 {
			errno, bad := errnoFromPost(r)
			return posted + bad, &Error{Op: op, Device: qp.dev, Errno: errno}
		}
		posted += k
	}
	return posted, nil
}

// Step is a connection's whole turn at the device in one crossing into C:
// what flags ask for, then post recvs, then sends, then poll cq (and its
// send half, first, if it is split: see NewSplitCQ) for up to
// len(out) completions, polling again while the CQ is empty up to tries
// polls in all (counted, not timed, so the crossing stays short on any
// device). It returns how many completions it moved into out. cq may be
// nil when out is empty and flags are 0: Step then only posts.
//
// Every receive is posted before any send, also when the lists are longer
// than one crossing takes (they are then posted ahead, in batches, in
// stepPlan's order): a send may carry credits that only those receives
// back. On failure the error names the verb that failed; nothing after it
// was done, and some work requests of a failed post may be on the queue.
//
// Step takes no lock of qp's or cq's: it is the hot path, and its caller
// already serialises its steps and orders them before qp.Close and
// cq.Close (a queue pair is destroyed once nothing steps on it, and a CQ
// once no queue pair completes into it). A Step ordered after a Close
// fails with an error wrapping net.ErrClosed; a Step racing a Close is the
// caller's bug.
func (qp *QP) Step(cq *CQ, flags StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	if cq != nil && flags&StepTakeEvent != 0 && (cq.ch == nil || !cq.ch.sole.Load()) {
		return 0, &Error{Op: "ibv_get_cq_event", Device: cq.dev, Err: ErrSharedChannel}
	}
	if qp.c == nil {
		return 0, &Error{Op: "ibv_post_send", Device: qp.dev, Err: errClosed}
	}
	var cqh, scqh, ch C.uintptr_t
	cqDev := qp.dev
	if cq != nil {
		if cq.c == nil {
			return 0, &Error{Op: "ibv_poll_cq", Device: cq.dev, Err: errClosed}
		}
		cqh, scqh, cqDev = handle(unsafe.Pointer(cq.c)), cq.sendHandle(), cq.dev
		if flags&StepTakeEvent != 0 {
			// cq.ch.c outlives cq.c: the channel is destroyed only
			// once its last CQ is.
			ch = handle(unsafe.Pointer(cq.ch.c))
		}
	} else if flags != 0 || len(out) > 0 {
		return 0, &Error{Op: "ibv_poll_cq", Device: qp.dev, Err: errNoCQ}
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
	CountCgoCall()
	r := int64(C.rnet_step(handle(unsafe.Pointer(qp.c)), qp.srqHandle, cqh, scqh, ch, C.int(flags), rp, C.int(len(recvs)), sp, C.int(len(sends)), wp, C.int(min(len(out), 1<<30)), C.int(min(max(tries, 1), 1<<30))))
	if r >= 0 {
		return int(r), nil
	}
	return 0, stepError(-r, qp.dev, cqDev)
}

// errNoCQ is Step's error when asked to poll or arm without a CQ.
var errNoCQ = errors.New("no CQ to poll")

// stepStage is a stage of rnet_step, as its failure return names it:
// -(stage << stageShift | errno << 8 | index).
type stepStage int64

const stageShift = C.RNET_STAGE_SHIFT

const (
	stagePostRecv    = stepStage(C.RNET_STAGE_POST_RECV)
	stagePostSend    = stepStage(C.RNET_STAGE_POST_SEND)
	stagePollCQ      = stepStage(C.RNET_STAGE_POLL_CQ)
	stageReqNotifyCQ = stepStage(C.RNET_STAGE_REQ_NOTIFY_CQ)
	stageGetCQEvent  = stepStage(C.RNET_STAGE_GET_CQ_EVENT)
	stagePostSRQRecv = stepStage(C.RNET_STAGE_POST_SRQ_RECV)
)

// stepError turns rnet_step's negated return into the error of the stage
// that failed (see rnet_step in shim.h).
func stepError(r int64, qpDev, cqDev string) error {
	stage, code := stepStage(r>>stageShift), C.int(r&(1<<stageShift-1))
	switch stage {
	case stagePostRecv, stagePostSRQRecv, stagePostSend:
		errno, _ := errnoFromPost(code)
		return &Error{Op: stage.verb(), Device: qpDev, Errno: errno}
	case stagePollCQ:
		return pollError(cqDev, int(code>>8))
	default:
		return &Error{Op: stage.verb(), Device: cqDev, Errno: syscall.Errno(code >> 8)}
	}
}

// verb is the verb a stage calls, for its errors.
func (s stepStage) verb() string {
	switch s {
	case stagePostRecv:
		return "ibv_post_recv"
	case stagePostSRQRecv:
		return "ibv_post_srq_recv"
	case stagePostSend:
		return "ibv_post_send"
	case stagePollCQ:
		return "ibv_poll_cq"
	case stageGetCQEvent:
		return "ibv_get_cq_event"
	default:
		return "ibv_req_notify_cq"
	}
}

// Step is QP.Step for a CQ that many queue pairs share, without posting:
// what flags ask (StepTakeEvent needs cq, with its send half, to be the
// only CQ on its channel), then up to tries polls, in one crossing. Like QP.Step it takes
// no lock: its caller serialises its polls and orders them before Close.
func (cq *CQ) Step(flags StepFlags, out []wr.Completion, tries int) (int, error) {
	if cq.c == nil {
		return 0, &Error{Op: "ibv_poll_cq", Device: cq.dev, Err: errClosed}
	}
	if flags&StepTakeEvent != 0 && (cq.ch == nil || !cq.ch.sole.Load()) {
		return 0, &Error{Op: "ibv_get_cq_event", Device: cq.dev, Err: ErrSharedChannel}
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
	r := int64(C.rnet_step(0, 0, handle(unsafe.Pointer(cq.c)), cq.sendHandle(), ch, C.int(flags), nil, 0, nil, 0, wp, C.int(min(len(out), 1<<30)), C.int(min(max(tries, 1), 1<<30))))
	if r >= 0 {
		return int(r), nil
	}
	return 0, stepError(-r, cq.dev, cq.dev)
}
