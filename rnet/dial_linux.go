//go:build linux && cgo

package rnet

import (
	"context"
	"net"
	"net/netip"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/stream"
)

// dial connects to raddr from laddr (any local address if invalid), trying
// again while the listener refuses as busy (see dialRetryingBusy).
func dial(ctx context.Context, set settings, laddr netip.Addr, raddr netip.AddrPort) (*Conn, error) {
	return dialRetryingBusy(ctx, func(ctx context.Context) (*Conn, error) {
		return dialOnce(ctx, set, laddr, raddr)
	})
}

// dialOnce makes one connect: resolve the address and route, set up the
// queue pair, connect, and take the peer's private data from the
// established event.
func dialOnce(ctx context.Context, set settings, laddr netip.Addr, raddr netip.AddrPort) (*Conn, error) {
	remote := netAddr(raddr)
	var local net.Addr
	if laddr.IsValid() {
		local = netAddr(netip.AddrPortFrom(laddr, 0))
	}
	fail := func(err error) (*Conn, error) { return nil, dialError(ctx, local, remote, err) }
	if set.transportErr != nil {
		return fail(set.transportErr)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	ch, err := cm.NewEventChannel()
	if err != nil {
		return fail(err)
	}
	id, err := ch.NewID()
	if err != nil {
		ch.Close()
		return fail(err)
	}
	// A timeout asked for is set before the route too, so that the path's
	// packet lifetime, and with it the connection manager's own message
	// timeouts, follow it; setup sets the queue pair's.
	if n := set.transport.ackTimeout; n != 0 {
		if err := id.SetAckTimeout(n); err != nil {
			id.Close()
			ch.Close()
			return fail(err)
		}
	}
	// Before the route: resolving it puts the traffic class in the path,
	// which the queue pairs of both ends take.
	if set.transport.setTraffic {
		if err := id.SetTOS(set.transport.trafficClass); err != nil {
			id.Close()
			ch.Close()
			return fail(err)
		}
	}
	// HandshakeTimeout bounds, in all, the waits on the network below.
	answer := newAnswerBudget(set.handshakeTimeout, raddr.String())
	err = answer.wait(ctx, stepAddr, func(ctx context.Context) error {
		return id.Resolve(ctx, laddr, raddr, cm.RsocketRetry)
	})
	if err != nil {
		id.Close()
		ch.Close()
		return fail(err)
	}
	q, eng, err := setup(id, ch, dialRingConfig(set), set.transport, false)
	if err != nil {
		id.Close()
		ch.Close()
		return fail(err)
	}
	local = q.laddr
	abort := func(err error) (*Conn, error) {
		q.Disconnect()
		q.Shutdown()
		q.Destroy()
		return fail(err)
	}
	if err := postInitialRecvs(q, eng); err != nil {
		return abort(err)
	}
	p := connParam(eng, eng.Config().IWARP, set.transport, q.portMTU)
	if p.PrivateData, err = requestData(p.PrivateData, set); err != nil {
		return abort(err)
	}
	if err := id.Connect(p); err != nil {
		return abort(err)
	}
	var ev cm.Event
	err = answer.wait(ctx, stepConnect, func(ctx context.Context) error {
		var err error
		ev, err = id.Await(ctx, cm.EventEstablished)
		return err
	})
	if err != nil {
		return abort(explainReject(err))
	}
	agreed, err := acceptReply(eng, ev.Param.PrivateData, set.resume)
	if err != nil {
		return abort(err)
	}
	var resumer stream.Resumer
	if agreed != nil {
		resumer = newDialResumer(set, raddr, addrOf(q.laddr), agreed, q.device)
	}
	return newNegotiatedConn(q, eng, set, agreed, resumer), nil
}
