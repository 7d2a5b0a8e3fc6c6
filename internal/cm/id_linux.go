//go:build cgo

package cm

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// ID is an rdma_cm_id in the RDMA_PS_TCP port space: a listener, or one
// reliable connection.
type ID struct {
	// mu is read-held by calls on the id, write-held by Close, Migrate,
	// CreateQP and the QP's destruction. Lock order: a QP's own lock
	// (held while it is destroyed) before mu.
	mu     lockcount.RWMutex
	c      *C.struct_rdma_cm_id
	handle uintptr
	ch     *EventChannel
	qp     *verbs.QP
	qpLive bool // qp exists and is not destroyed yet
	// own is qp's C struct while qp is live, when the QP is rnet's own
	// and not librdmacm's id->qp (InfiniBand, RoCE; see ownqp_linux.go).
	// Written with mu write-held, like qp.
	own *C.struct_ibv_qp
	// request is the private data of the connection request the id came
	// from, until Accept, whose ConnParam.PeerMTU reads it. Guarded by
	// mu.
	request []byte
	// replyMTU is Connect's ConnParam.PeerMTU, for the reply. Written with
	// mu write-held.
	replyMTU func(privateData []byte) int
	vctx     *verbs.Context
	dst      netip.AddrPort // the address being resolved, for errors before the peer is known
}

// Events name their id by a handle that rnet stores in the id's context
// field, not by the C pointer: a handle is never reused, while a freed id's
// address may be handed to the next rdma_create_id while an event read just
// before the free is still on its way to Go.
var (
	registryMu lockcount.Mutex
	registry   = map[uintptr]*ID{}
	nextHandle atomic.Uintptr
)

func register(id *ID) uintptr {
	h := nextHandle.Add(1)
	registryMu.Lock()
	registry[h] = id
	registryMu.Unlock()
	return h
}

func unregister(h uintptr) {
	registryMu.Lock()
	delete(registry, h)
	registryMu.Unlock()
}

func lookup(h uintptr) *ID {
	registryMu.Lock()
	defer registryMu.Unlock()
	return registry[h]
}

// NewID creates an id whose events arrive on ch.
func (ch *EventChannel) NewID() (*ID, error) {
	if !ch.addID() {
		return nil, &Error{Op: "rdma_create_id", Err: errClosed}
	}
	id := &ID{ch: ch}
	id.handle = register(id)
	var c *C.struct_rdma_cm_id
	verbs.CountCgoCall()
	if r := C.rnet_create_id(ch.c, &c, C.uintptr_t(id.handle)); r != 0 {
		unregister(id.handle)
		ch.removeID()
		return nil, &Error{Op: "rdma_create_id", Errno: syscall.Errno(r)}
	}
	id.c = c
	return id, nil
}

// adopt wraps the new id of a CONNECT_REQUEST, which librdmacm created on
// the listener's channel with the listener's context.
func (ch *EventChannel) adopt(c *C.struct_rdma_cm_id) (*ID, error) {
	if !ch.addID() {
		verbs.CountCgoCall()
		C.rdma_reject(c, nil, 0)
		verbs.CountCgoCall()
		C.rdma_destroy_id(c)
		return nil, errClosed
	}
	id := &ID{ch: ch, c: c}
	id.handle = register(id)
	verbs.CountCgoCall()
	C.rnet_set_handle(c, C.uintptr_t(id.handle))
	return id, nil
}

func (id *ID) errf(op string, errno syscall.Errno, err error) error {
	return &Error{Op: op, Addr: id.addrStringLocked(), Errno: errno, Err: err}
}

// call runs f on the live C id under the read lock.
func (id *ID) call(op string, f func(c *C.struct_rdma_cm_id) C.int) error {
	id.mu.RLock()
	defer id.mu.RUnlock()
	if id.c == nil {
		return &Error{Op: op, Err: errClosed}
	}
	verbs.CountCgoCall()
	if r := f(id.c); r != 0 {
		return id.errf(op, syscall.Errno(r), nil)
	}
	return nil
}

// Bind binds the id to a local address (a port alone, with an unspecified
// address, binds on all devices).
func (id *ID) Bind(addr netip.AddrPort) error {
	err := id.call("rdma_bind_addr", func(c *C.struct_rdma_cm_id) C.int { return C.rnet_bind_addr(c, toC(addr)) })
	if err != nil {
		err.(*Error).Addr = addr.String()
	}
	return err
}

// SetAFOnly says whether a later Bind to the IPv6 wildcard address takes
// IPv6 connection requests only, or IPv4 ones as well (the kernel's default
// follows net.ipv6.bindv6only). It must come before Bind.
func (id *ID) SetAFOnly(only bool) error {
	v := C.int(0)
	if only {
		v = 1
	}
	return id.call("rdma_set_option(AFONLY)", func(c *C.struct_rdma_cm_id) C.int { return C.rnet_set_afonly(c, v) })
}

// SetAckTimeout sets the local ACK timeout of the id's QP to 4.096 µs ×
// 2^exp (0 turns the timer off): how long the reliable transport waits for
// an acknowledgement before it resends. It is this side's only; the kernel
// applies it when the QP moves to RTS, so the dialling side sets it before
// Connect and the accepting side before Accept. Set before ResolveRoute, it
// also sets the RoCE path's packet lifetime (exp−1), which the connection
// request carries and the CM's own message timeouts use. iWARP ignores it.
func (id *ID) SetAckTimeout(exp uint8) error {
	const op = "rdma_set_option(ACK_TIMEOUT)"
	if exp > MaxAckTimeout {
		id.mu.RLock()
		defer id.mu.RUnlock()
		return id.errf(op, syscall.EINVAL, fmt.Errorf("rdma: ACK timeout exponent %d is out of range: 0 to %d", exp, MaxAckTimeout))
	}
	return id.call(op, func(c *C.struct_rdma_cm_id) C.int {
		return C.rnet_set_ack_timeout(c, C.uint8_t(exp))
	})
}

// SetTOS sets the IP TOS byte (DSCP << 2 | ECN) of the id's connection: on
// RoCE, the traffic class of its packets, from which the kernel also derives
// the service level (the Ethernet priority). It must come before
// ResolveRoute, which puts it in the path that the connection request
// carries to the peer, whose queue pair takes it from there (a listening
// id's does not reach the connections it accepts). iWARP connections are
// TCP's and do not use it.
func (id *ID) SetTOS(tos uint8) error {
	return id.call("rdma_set_option(TOS)", func(c *C.struct_rdma_cm_id) C.int {
		return C.rnet_set_tos(c, C.uint8_t(tos))
	})
}

// Listen starts listening; CONNECT_REQUEST events follow on the channel.
func (id *ID) Listen(backlog int) error {
	backlog = min(max(backlog, 0), 1<<31-1) // the kernel caps it far lower anyway
	return id.call("rdma_listen", func(c *C.struct_rdma_cm_id) C.int {
		return C.rnet_listen(c, C.int(backlog))
	})
}

// ResolveAddr starts resolving dst (from src, if valid) to an RDMA address;
// ADDR_RESOLVED or ADDR_ERROR follows. The id is then bound to a device.
func (id *ID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	var s netip.AddrPort
	if src.IsValid() {
		s = netip.AddrPortFrom(src, 0)
	}
	id.mu.Lock()
	id.dst = dst
	id.mu.Unlock()
	return id.call("rdma_resolve_addr", func(c *C.struct_rdma_cm_id) C.int {
		return C.rnet_resolve_addr(c, toC(s), toC(dst), C.int(ms(timeout)))
	})
}

// ResolveRoute starts resolving the route to the resolved address;
// ROUTE_RESOLVED or ROUTE_ERROR follows.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	return id.call("rdma_resolve_route", func(c *C.struct_rdma_cm_id) C.int {
		return C.rnet_resolve_route(c, C.int(ms(timeout)))
	})
}

func ms(d time.Duration) int {
	if d <= 0 {
		return 1
	}
	const most = (1<<31 - 1) * time.Millisecond // rdma_cm takes an int of ms
	return int((min(d, most) + time.Millisecond - 1) / time.Millisecond)
}

func paramToC(p *ConnParam) (*C.struct_rnet_conn_param, error) {
	var c C.struct_rnet_conn_param
	// The length travels in a uint8_t: 256 bytes would wrap to none.
	if len(p.PrivateData) > min(len(c.private_data), 255) {
		return nil, syscall.EINVAL
	}
	for i, b := range p.PrivateData {
		c.private_data[i] = C.uint8_t(b)
	}
	c.private_data_len = C.uint8_t(len(p.PrivateData))
	c.responder_resources = C.uint8_t(p.ResponderResources)
	c.initiator_depth = C.uint8_t(p.InitiatorDepth)
	c.flow_control = C.uint8_t(p.FlowControl)
	c.retry_count = C.uint8_t(p.RetryCount)
	c.rnr_retry_count = C.uint8_t(p.RNRRetryCount)
	c.srq = C.uint8_t(p.SRQ)
	c.qp_num = C.uint32_t(p.QPNum)
	return &c, nil
}

// Connect sends the connection request; ESTABLISHED (with the peer's private
// data), REJECTED, UNREACHABLE or CONNECT_ERROR follows.
//
// With a QP of rnet's own (InfiniBand, RoCE), the reply comes as
// CONNECT_RESPONSE, which Await, waiting for ESTABLISHED, turns into it once
// it has made the QP ready with a path MTU at most the local port's and what
// p.PeerMTU reads from the reply.
func (id *ID) Connect(p ConnParam) error {
	cp, err := paramToC(&p)
	if err != nil {
		return id.call("rdma_connect", func(*C.struct_rdma_cm_id) C.int { return C.EINVAL })
	}
	id.mu.Lock()
	id.replyMTU = p.PeerMTU
	id.mu.Unlock()
	return id.call("rdma_connect", func(c *C.struct_rdma_cm_id) C.int { return C.rnet_connect(c, cp, id.own) })
}

// Accept accepts the connection request this id came from; ESTABLISHED
// follows. A QP of rnet's own is made ready first, its path MTU limited to
// the local port's and to what p.PeerMTU reads from the request.
func (id *ID) Accept(p ConnParam) error {
	cp, err := paramToC(&p)
	if err != nil {
		return id.call("rdma_accept", func(*C.struct_rdma_cm_id) C.int { return C.EINVAL })
	}
	id.mu.Lock()
	request, own := id.request, id.own
	id.request = nil
	id.mu.Unlock()
	if own != nil {
		return id.acceptOwn(cp, peerMTUCode(p.PeerMTU, request))
	}
	return id.call("rdma_accept", func(c *C.struct_rdma_cm_id) C.int { return C.rnet_accept(c, cp) })
}

// Reject refuses the connection request this id came from, sending
// privateData (may be nil). The id should then be closed.
func (id *ID) Reject(privateData []byte) error {
	if len(privateData) > 255 {
		return id.call("rdma_reject", func(*C.struct_rdma_cm_id) C.int { return C.EINVAL })
	}
	var buf [255]C.uint8_t
	for i, b := range privateData {
		buf[i] = C.uint8_t(b)
	}
	return id.call("rdma_reject", func(c *C.struct_rdma_cm_id) C.int {
		return C.rnet_reject(c, unsafePointer(&buf[0]), C.uint8_t(len(privateData)))
	})
}

// Disconnect disconnects; it moves the QP to the error state, and both
// sides get DISCONNECTED. A side that gets DISCONNECTED first should call
// Disconnect too: on InfiniBand and RoCE that sends the reply (DREP) which
// the initiator's DISCONNECTED waits for; without it the initiator only gets
// DISCONNECTED when the CM's DREQ retries time out, tens of seconds later.
func (id *ID) Disconnect() error {
	id.mu.RLock()
	own := id.own != nil
	id.mu.RUnlock()
	if own {
		return id.disconnectOwn(true)
	}
	return id.call("rdma_disconnect", func(c *C.struct_rdma_cm_id) C.int {
		return C.rnet_disconnect(c)
	})
}

// DisconnectKeepingQP sends the disconnect request as Disconnect does but
// leaves the QP in its state, so that it can go on sending, as a peer's QP
// that was not made through its id could. Tests play hostile peers with it.
func (id *ID) DisconnectKeepingQP() error {
	id.mu.RLock()
	own := id.own != nil
	id.mu.RUnlock()
	if own {
		return id.disconnectOwn(false)
	}
	return id.call("rdma_disconnect", func(c *C.struct_rdma_cm_id) C.int {
		return C.rnet_disconnect_keep_qp(c)
	})
}

// Migrate moves the id onto another event channel; its later events arrive
// there. An accepted connection is typically moved off the listener's
// channel onto its own.
func (id *ID) Migrate(to *EventChannel) error {
	if !to.addID() {
		return &Error{Op: "rdma_migrate_id", Err: errClosed}
	}
	id.mu.Lock()
	if id.c == nil {
		id.mu.Unlock()
		to.removeID()
		return &Error{Op: "rdma_migrate_id", Err: errClosed}
	}
	verbs.CountCgoCall()
	if r := C.rnet_migrate_id(id.c, to.c); r != 0 {
		err := id.errf("rdma_migrate_id", syscall.Errno(r), nil)
		id.mu.Unlock()
		to.removeID()
		return err
	}
	from := id.ch
	id.ch = to
	id.mu.Unlock()
	from.removeID()
	return nil
}

// Channel is the event channel the id reports on.
func (id *ID) Channel() *EventChannel {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.ch
}

// Context is the device the id is bound to (after Bind to a device's address,
// ResolveAddr, or for an id from CONNECT_REQUEST), borrowed from librdmacm.
// Make the PD, CQs and MRs for the connection on it.
func (id *ID) Context() (*verbs.Context, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.c == nil {
		return nil, &Error{Op: "rdma_cm_id verbs", Err: errClosed}
	}
	if id.vctx != nil {
		return id.vctx, nil
	}
	verbs.CountCgoCall()
	p := C.rnet_id_verbs(id.c)
	if p == nil {
		return nil, id.errf("rdma_cm_id verbs", syscall.ENODEV, errors.New("rdma: id is not bound to a device yet"))
	}
	ctx, err := verbs.WrapContext(unsafePointer(p))
	if err != nil {
		return nil, err
	}
	id.vctx = ctx
	return ctx, nil
}

// CreateQP creates the id's RC QP on pd with the given CQs and sizes
// (sq_sig_all = 1, as rsocket). The returned QP's Caps are what the device
// granted, e.g. its max_inline_data. The QP belongs to the id: closing it,
// or the id, calls rdma_destroy_qp.
func (id *ID) CreateQP(pd *verbs.PD, send, recv *verbs.CQ, caps verbs.QPCaps) (*verbs.QP, error) {
	return id.CreateQPOnSRQ(pd, send, recv, nil, caps)
}

// CreateQPOnSRQ is CreateQP for a QP that takes its receives from srq (nil:
// from a receive queue of its own, as CreateQP). With an SRQ the QP has no
// receive queue, so caps.MaxRecvWR and MaxRecvSGE are ignored and granted as
// 0; its receive completions still go to recv, with its QP number. The SRQ
// must stay open until the QP is destroyed, and need not be in pd.
func (id *ID) CreateQPOnSRQ(pd *verbs.PD, send, recv *verbs.CQ, srq *verbs.SRQ, caps verbs.QPCaps) (*verbs.QP, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.c == nil {
		return nil, &Error{Op: "rdma_create_qp", Err: errClosed}
	}
	if id.qpLive {
		return nil, id.errf("rdma_create_qp", syscall.EEXIST, nil)
	}
	ownQP := ownQPOn(id.c)
	ppd, psend, precv := pd.Ptr(), send.Ptr(), recv.Ptr()
	if ppd == nil || psend == nil || precv == nil {
		return nil, id.errf("rdma_create_qp", syscall.EINVAL, errClosed)
	}
	var psrq *C.struct_ibv_srq
	if srq != nil {
		if psrq = (*C.struct_ibv_srq)(srq.Ptr()); psrq == nil {
			return nil, id.errf("rdma_create_qp", syscall.EINVAL, errClosed)
		}
	}
	cc := C.struct_ibv_qp_cap{
		max_send_wr:     C.uint32_t(caps.MaxSendWR),
		max_recv_wr:     C.uint32_t(caps.MaxRecvWR),
		max_send_sge:    C.uint32_t(caps.MaxSendSGE),
		max_recv_sge:    C.uint32_t(caps.MaxRecvSGE),
		max_inline_data: C.uint32_t(caps.MaxInlineData),
	}
	if ownQP {
		return id.createOwnQPLocked((*C.struct_ibv_pd)(ppd), (*C.struct_ibv_cq)(psend), (*C.struct_ibv_cq)(precv), psrq, srq, &cc)
	}
	verbs.CountCgoCall()
	if r := C.rnet_create_qp(id.c, (*C.struct_ibv_pd)(ppd), (*C.struct_ibv_cq)(psend), (*C.struct_ibv_cq)(precv), psrq, &cc); r != 0 {
		return nil, id.errf("rdma_create_qp", syscall.Errno(r), nil)
	}
	granted := grantedCaps(&cc)
	c := id.c
	verbs.CountCgoCall()
	id.qp = verbs.WrapQPOnSRQ(unsafePointer(C.rnet_id_qp(c)), granted, srq, func() error {
		// Exclusive: rdma_disconnect, under a call's read lock, moves
		// id->qp to the error state, and rdma_destroy_qp frees it.
		id.mu.Lock()
		defer id.mu.Unlock()
		verbs.CountCgoCall()
		C.rdma_destroy_qp(c)
		id.qpLive = false
		return nil
	})
	id.qpLive = true
	return id.qp, nil
}

// QP is the id's QP, or nil.
func (id *ID) QP() *verbs.QP {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.qp
}

// LocalAddr is the id's source address (zero before bind/resolve).
func (id *ID) LocalAddr() netip.AddrPort {
	id.mu.RLock()
	defer id.mu.RUnlock()
	if id.c == nil {
		return netip.AddrPort{}
	}
	verbs.CountCgoCall()
	return fromC(C.rnet_local_addr(id.c))
}

// RemoteAddr is the peer's address (zero before resolve or accept).
func (id *ID) RemoteAddr() netip.AddrPort {
	id.mu.RLock()
	defer id.mu.RUnlock()
	if id.c == nil {
		return netip.AddrPort{}
	}
	verbs.CountCgoCall()
	return fromC(C.rnet_peer_addr(id.c))
}

func (id *ID) addrString() string {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.addrStringLocked()
}

// addrStringLocked names the peer, else the address being resolved, else
// the local address.
func (id *ID) addrStringLocked() string {
	if id.c == nil {
		return ""
	}
	verbs.CountCgoCall()
	if a := fromC(C.rnet_peer_addr(id.c)); a.Addr().IsValid() && !a.Addr().IsUnspecified() {
		return a.String()
	}
	if id.dst.IsValid() {
		return id.dst.String()
	}
	verbs.CountCgoCall()
	if a := fromC(C.rnet_local_addr(id.c)); a.Addr().IsValid() {
		return a.String()
	}
	return ""
}

// Close destroys the id's QP (if any) and the id. It is idempotent; calls
// on a closed id fail with an error wrapping net.ErrClosed. Close PDs, CQs
// and MRs made on the id's Context before the last id on that device.
func (id *ID) Close() error {
	for {
		id.mu.RLock()
		qp, live, closed := id.qp, id.qpLive, id.c == nil
		id.mu.RUnlock()
		if closed {
			return nil
		}
		// Outside id.mu: destroying the QP takes it (see CreateQP).
		if live {
			if err := qp.Close(); err != nil {
				return err
			}
		}
		id.mu.Lock()
		if !id.qpLive {
			break // with id.mu held
		}
		id.mu.Unlock() // a QP was made meanwhile
	}
	if id.c == nil {
		id.mu.Unlock()
		return nil
	}
	verbs.CountCgoCall()
	if r := C.rnet_destroy_id(id.c); r != 0 {
		err := id.errf("rdma_destroy_id", syscall.Errno(r), nil)
		id.mu.Unlock()
		return err
	}
	id.c = nil
	if id.vctx != nil {
		id.vctx.Close() // borrowed: only stops its use
	}
	unregister(id.handle)
	ch := id.ch
	id.mu.Unlock()
	ch.removeID()
	return nil
}
