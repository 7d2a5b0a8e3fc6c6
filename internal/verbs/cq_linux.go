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

// NewCQ creates a CQ with room for at least cqe completions. With a channel,
// ReqNotify arms it to report there; ch may be nil for a polled-only CQ.
func (ctx *Context) NewCQ(cqe int, ch *CompChannel) (*CQ, error) {
	ctx.mu.RLock()
	defer ctx.mu.RUnlock()
	if ctx.c == nil {
		return nil, ctx.closedErr("ibv_create_cq")
	}
	var cch *C.struct_ibv_comp_channel
	if ch != nil {
		ch.mu.Lock()
		defer ch.mu.Unlock()
		if ch.state.Closed() {
			return nil, &Error{Op: "ibv_create_cq", Device: ctx.name, Err: errClosed}
		}
		cch = ch.c
	}
	if cqe < 0 || cqe > 1<<31-1 {
		return nil, &Error{Op: "ibv_create_cq", Device: ctx.name, Errno: syscall.EINVAL}
	}
	CountCgoCall()
	c, err := C.ibv_create_cq(ctx.c, C.int(cqe), nil, cch, 0)
	if c == nil {
		return nil, &Error{Op: "ibv_create_cq", Device: ctx.name, Errno: errnoOr(err, syscall.ENOMEM)}
	}
	cq := &CQ{c: c, ch: ch, dev: ctx.name, cqe: int(c.cqe)}
	if ch != nil {
		ch.cqs[handle(unsafe.Pointer(c))] = cq
		ch.updateSoleLocked()
	}
	return cq, nil
}

// NewSplitCQ creates a CQ for receive completions with a second CQ (Send)
// for send completions, each with room for cqe, both on ch. Its Step polls
// both and arms them apart (StepArm, StepArmSend): a waiter that needs
// only its peer's messages leaves the send half unarmed, and the
// completions of its own sends, which on a software device come within
// the post, do not wake it. Close destroys both.
func (ctx *Context) NewSplitCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if ch == nil {
		return nil, &Error{Op: "ibv_create_cq", Device: ctx.name, Errno: syscall.EINVAL}
	}
	cq, err := ctx.NewCQ(cqe, ch)
	if err != nil {
		return nil, err
	}
	send, err := ctx.NewCQ(cqe, ch)
	if err != nil {
		cq.Close()
		return nil, err
	}
	ch.mu.Lock()
	cq.send = send
	ch.updateSoleLocked()
	ch.mu.Unlock()
	return cq, nil
}

// Send is the CQ a queue pair's send completions must go to: the send half
// of a split CQ, else cq itself.
func (cq *CQ) Send() *CQ {
	if cq.send != nil {
		return cq.send
	}
	return cq
}

// sendHandle is the send half's handle for rnet_step, or 0.
func (cq *CQ) sendHandle() C.uintptr_t {
	if cq.send == nil || cq.send.c == nil {
		return 0
	}
	return handle(unsafe.Pointer(cq.send.c))
}

// Size is the number of entries the device gave the CQ.
func (cq *CQ) Size() int { return cq.cqe }

// Ptr returns the struct ibv_cq*, or nil after Close.
func (cq *CQ) Ptr() unsafe.Pointer {
	cq.mu.RLock()
	defer cq.mu.RUnlock()
	return unsafe.Pointer(cq.c)
}

// Poll moves up to len(out) completions into out, in one crossing into C,
// and returns how many it moved. It does not allocate.
func (cq *CQ) Poll(out []wr.Completion) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	cq.mu.RLock()
	defer cq.mu.RUnlock()
	if cq.c == nil {
		return 0, &Error{Op: "ibv_poll_cq", Device: cq.dev, Err: errClosed}
	}
	CountCgoCall()
	n := C.rnet_poll(handle(unsafe.Pointer(cq.c)), (*C.struct_rnet_wc)(unsafe.Pointer(&out[0])), C.int(min(len(out), 1<<30)))
	if n < 0 {
		return 0, pollError(cq.dev, int(-n))
	}
	return int(n), nil
}

// ReqNotify arms the CQ: the next completion (or the next solicited one)
// produces one event on the channel.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.mu.RLock()
	defer cq.mu.RUnlock()
	if cq.c == nil {
		return &Error{Op: "ibv_req_notify_cq", Device: cq.dev, Err: errClosed}
	}
	so := C.int(0)
	if solicitedOnly {
		so = 1
	}
	CountCgoCall()
	if r := C.rnet_req_notify_cq(handle(unsafe.Pointer(cq.c)), so); r != 0 {
		return &Error{Op: "ibv_req_notify_cq", Device: cq.dev, Errno: retErrno(r, nil)}
	}
	return nil
}

// Close destroys the CQ (and its send half, if split) after acknowledging
// its outstanding events. QPs using it must be destroyed first (else EBUSY,
// and the CQ stays usable). It is idempotent.
func (cq *CQ) Close() error {
	if cq.send != nil {
		if err := cq.send.Close(); err != nil {
			return err
		}
	}
	return cq.close()
}

func (cq *CQ) close() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.c == nil {
		return nil
	}
	ch := cq.ch
	if ch != nil {
		ch.mu.Lock()
		cq.dead = true
		if cq.unacked > 0 {
			CountCgoCall()
			C.ibv_ack_cq_events(cq.c, C.uint(cq.unacked))
			cq.unacked = 0
		}
		ch.mu.Unlock()
	}
	// ibv_destroy_cq blocks until every event read from the channel is
	// acknowledged; a waiter that has just read one acknowledges it
	// because dead is set. ch.mu must not be held here.
	CountCgoCall()
	r, err := C.ibv_destroy_cq(cq.c)
	if ch != nil {
		ch.mu.Lock()
		defer ch.mu.Unlock()
	}
	if r != 0 {
		cq.dead = false
		return &Error{Op: "ibv_destroy_cq", Device: cq.dev, Errno: retErrno(r, err)}
	}
	if ch != nil {
		if h := handle(unsafe.Pointer(cq.c)); ch.cqs[h] == cq {
			delete(ch.cqs, h)
		}
		ch.updateSoleLocked()
		cq.c = nil
		return ch.destroyIfUnusedLocked()
	}
	cq.c = nil
	return nil
}
