//go:build cgo

package cm

/*
#include "ownqp.h"
*/
import "C"

import (
	"errors"
	"syscall"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// On InfiniBand and RoCE an id's QP is rnet's own, not attached to the id
// (id->qp stays NULL): librdmacm moves an attached QP to RTR inside
// rdma_accept and while it reads the reply, with the path MTU the request or
// the route carried, which is the dialler's port's and may be more than
// this side's port or the peer's can carry. With its own QP rnet makes those
// transitions itself, with the connection manager's attributes
// (rdma_init_qp_attr, so the ACK timeout, retry counts and PSNs are the
// same) and the path MTU limited to both ports'. It also does what
// librdmacm did with an attached QP: INIT at creation, the error state on
// disconnect and on a failed handshake step. On iWARP the kernel moves the
// QP itself, and the attached QP stays.

// stepNames names the failed step of an ownqp.h helper.
var stepNames = map[C.int]string{
	C.RNET_STEP_CREATE:      "ibv_create_qp",
	C.RNET_STEP_INIT_ATTR:   "rdma_init_qp_attr(INIT)",
	C.RNET_STEP_INIT:        "ibv_modify_qp(INIT)",
	C.RNET_STEP_QUERY_PORT:  "ibv_query_port",
	C.RNET_STEP_RTR_ATTR:    "rdma_init_qp_attr(RTR)",
	C.RNET_STEP_RTR:         "ibv_modify_qp(RTR)",
	C.RNET_STEP_RTS_ATTR:    "rdma_init_qp_attr(RTS)",
	C.RNET_STEP_RTS:         "ibv_modify_qp(RTS)",
	C.RNET_STEP_ACCEPT:      "rdma_accept",
	C.RNET_STEP_ESTABLISH:   "rdma_establish",
	C.RNET_STEP_ERROR_STATE: "ibv_modify_qp(ERR)",
	C.RNET_STEP_DISCONNECT:  "rdma_disconnect",
}

func stepName(step C.int, fallback string) string {
	if n, ok := stepNames[step]; ok {
		return n
	}
	return fallback
}

func grantedCaps(cc *C.struct_ibv_qp_cap) verbs.QPCaps {
	return verbs.QPCaps{
		MaxSendWR:     uint32(cc.max_send_wr),
		MaxRecvWR:     uint32(cc.max_recv_wr),
		MaxSendSGE:    uint32(cc.max_send_sge),
		MaxRecvSGE:    uint32(cc.max_recv_sge),
		MaxInlineData: uint32(cc.max_inline_data),
	}
}

// ownQPOn says whether a QP made on id is rnet's own.
func ownQPOn(id *C.struct_rdma_cm_id) bool {
	verbs.CountCgoCall()
	return C.rnet_id_own_qp(id) != 0
}

// createOwnQPLocked makes the id's QP as rnet's own, in INIT. id.mu is
// held.
func (id *ID) createOwnQPLocked(pd *C.struct_ibv_pd, send, recv *C.struct_ibv_cq, psrq *C.struct_ibv_srq, srq *verbs.SRQ, cc *C.struct_ibv_qp_cap) (*verbs.QP, error) {
	var (
		qp   *C.struct_ibv_qp
		step C.int
	)
	verbs.CountCgoCall()
	if r := C.rnet_create_own_qp(id.c, pd, send, recv, psrq, cc, &qp, &step); r != 0 {
		return nil, id.errf(stepName(step, "rdma_create_qp"), syscall.Errno(r), nil)
	}
	id.own = qp
	id.qp = verbs.WrapQPOnSRQ(unsafePointer(qp), grantedCaps(cc), srq, func() error {
		// Exclusive: Disconnect, under a call's read lock, moves the
		// QP to the error state.
		id.mu.Lock()
		defer id.mu.Unlock()
		verbs.CountCgoCall()
		if r := C.ibv_destroy_qp(qp); r != 0 {
			return id.errf("ibv_destroy_qp", syscall.Errno(r), nil)
		}
		id.own = nil
		id.qpLive = false
		return nil
	})
	id.qpLive = true
	return id.qp, nil
}

// acceptOwn makes the id's own QP ready, its path MTU at most the port's
// and peerMTU (an IB MTU code, 0: no limit), and accepts.
func (id *ID) acceptOwn(cp *C.struct_rnet_conn_param, peerMTU C.int) error {
	id.mu.RLock()
	defer id.mu.RUnlock()
	if id.c == nil || id.own == nil {
		return &Error{Op: "rdma_accept", Err: errClosed}
	}
	var step C.int
	verbs.CountCgoCall()
	if r := C.rnet_accept_own(id.c, id.own, cp, peerMTU, &step); r != 0 {
		return id.errf(stepName(step, "rdma_accept"), syscall.Errno(r), nil)
	}
	return nil
}

// establishOwn makes the id's own QP ready on the peer's reply, whose
// private data is given, and completes the handshake (rdma_establish).
func (id *ID) establishOwn(reply []byte) error {
	id.mu.RLock()
	defer id.mu.RUnlock()
	if id.c == nil || id.own == nil {
		return &Error{Op: "rdma_establish", Err: errClosed}
	}
	var step C.int
	verbs.CountCgoCall()
	if r := C.rnet_establish_own(id.c, id.own, peerMTUCode(id.replyMTU, reply), &step); r != 0 {
		return id.errf(stepName(step, "rdma_establish"), syscall.Errno(r), nil)
	}
	return nil
}

// disconnectOwn disconnects, first moving the own QP (if not yet
// destroyed) to the error state if toError.
func (id *ID) disconnectOwn(toError bool) error {
	id.mu.RLock()
	defer id.mu.RUnlock()
	if id.c == nil {
		return &Error{Op: "rdma_disconnect", Err: errClosed}
	}
	qp := id.own
	if !toError {
		qp = nil
	}
	var step C.int
	verbs.CountCgoCall()
	if r := C.rnet_disconnect_own(id.c, qp, &step); r != 0 {
		return id.errf(stepName(step, "rdma_disconnect"), syscall.Errno(r), nil)
	}
	return nil
}

// PortMTU is the active MTU, in bytes, of the port the id is bound to: the
// largest packet payload it sends and takes.
func (id *ID) PortMTU() (int, error) {
	id.mu.RLock()
	defer id.mu.RUnlock()
	if id.c == nil {
		return 0, &Error{Op: "ibv_query_port", Err: errClosed}
	}
	var code C.int
	verbs.CountCgoCall()
	if r := C.rnet_port_mtu(id.c, &code); r != 0 {
		return 0, id.errf("ibv_query_port", syscall.Errno(r), errors.New("rdma: cannot read the port's active MTU"))
	}
	return MTUBytes(uint8(code)), nil
}

// peerMTUCode is the IB MTU code of what peer reads from privateData, 0
// when peer is nil or says nothing usable.
func peerMTUCode(peer func([]byte) int, privateData []byte) C.int {
	if peer == nil {
		return 0
	}
	return C.int(MTUCode(peer(privateData)))
}
