//go:build cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import "unsafe"

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
