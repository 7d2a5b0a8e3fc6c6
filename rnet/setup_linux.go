//go:build linux && cgo

package rnet

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/pollgroup"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// setup creates the queue pair, CQ and registered regions for id, which must be
// bound to a device (resolved, or from a connection request), and the engine
// over them. On failure everything made so far is released, except id and ch.
func setup(id *cm.ID, ch *cm.EventChannel, cfg ring.Config, t transportSettings, accepting bool) (*verbsQP, *ring.Engine, error) {
	q := &verbsQP{ch: ch, id: id, accepting: accepting}
	eng, err := q.build(cfg, t)
	if err != nil {
		q.id, q.ch = nil, nil // the caller owns these on failure
		q.Destroy()
		return nil, nil, err
	}
	q.laddr = netAddr(id.LocalAddr())
	q.raddr = netAddr(id.RemoteAddr())
	return q, eng, nil
}

func (q *verbsQP) build(cfg ring.Config, t transportSettings) (*ring.Engine, error) {
	ctx, err := q.id.Context()
	if err != nil {
		return nil, err
	}
	q.device = ctx.Name()
	info, err := ctx.Query()
	if err != nil {
		return nil, err
	}
	q.deviceInfo = info
	// The connection manager applies it when connect or accept makes the
	// queue pair ready to send.
	if n := t.ackTimeoutOn(info.VendorID == verbs.VendorSoftRoCE); n != 0 {
		if err := q.id.SetAckTimeout(n); err != nil {
			return nil, err
		}
	}
	cfg = cfg.FitDevice(info.MaxQPWR, info.Transport == verbs.TransportIWARP)
	layout := cfg.Layout()
	if q.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if err := setupStage(q.accepting, "pd"); err != nil {
		return nil, err
	}
	// Only the receive ring and the target SGL are remotely writable, and
	// nothing is remotely readable: the peer can never see our send ring.
	// The rings start small (see ring.Config.IdleBufferSize); larger ones
	// are registered as the connection needs them (see queuepair_linux.go).
	for _, r := range []struct {
		size   int
		access verbs.Access
	}{
		{layout.SendRegion, regionAccess(ring.RegionSend)},
		{layout.RecvRegion, regionAccess(ring.RegionRecv)},
		{layout.TargetRegion, verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
	} {
		mr, err := q.pd.RegisterMR(r.size, r.access)
		if err != nil {
			// The user sizes the limit by connections, not by regions.
			var lm *verbs.LockedMemoryError
			if errors.As(err, &lm) {
				lm.Needed = pinnedPerConn(layout)
			}
			return nil, err
		}
		q.mrs = append(q.mrs, mr)
		if err := setupStage(q.accepting, fmt.Sprintf("mr%d", len(q.mrs)-1)); err != nil {
			return nil, err
		}
	}
	shared := cfg
	shared.SharedRecv = true
	if q.member, err = pollgroup.Join(ctx, info, pollgroup.Needs{
		Depth:     layout.CQDepth,
		SendDepth: layout.SendDepth,
		Recvs:     shared.FirstCredits() + ring.RecvHeadroom,
		// A retaining engine counts the peer's credit updates as messages
		// consumed, which a window that grows with a shared queue breaks.
		ShareRecvs: !cfg.IWARP && !cfg.RetainUntilReceived && t.shareRecvs(),
		SetupStage: func(stage string) error { return setupStage(q.accepting, stage) },
	}); err != nil {
		return nil, err
	}
	cq, srq := q.member.CQ(), q.member.SRQ()
	if srq != nil {
		cfg.SharedRecv = true
		// The engine must count this queue pair's receives as the shared
		// queue's: one that matches its own receive IDs fails at the
		// first message another member's receive takes.
		if !cfg.Normalize().SharedRecv {
			return nil, fmt.Errorf("rnet: %s: queue pair put on the shared receive queue of an engine that cannot share receives (IWARP %v, RetainUntilReceived %v)",
				q.device, cfg.IWARP, cfg.RetainUntilReceived)
		}
	}
	inline := cfg.InlineThreshold
	if inline < 0 {
		inline = 0
	}
	if cfg.IWARP {
		inline = max(inline, ring.MsgWordSize)
	}
	if q.qp, err = q.id.CreateQPOnSRQ(q.pd, cq.Send(), cq, srq, verbs.QPCaps{
		MaxSendWR:     uint32(layout.SendDepth),
		MaxRecvWR:     uint32(layout.RecvDepth),
		MaxSendSGE:    uint32(layout.MaxSendSGE),
		MaxRecvSGE:    uint32(max(layout.MaxRecvSGE, 1)),
		MaxInlineData: uint32(inline),
	}); err != nil {
		return nil, err
	}
	var cutOff func()
	if srq != nil {
		cutOff = q.Disconnect
	}
	q.member.Attach(q.qp, cutOff)
	if err := setupStage(q.accepting, "qp"); err != nil {
		return nil, err
	}
	if !cfg.IWARP {
		// Told to the peer, which limits its path MTU to it: the
		// dialler's connection manager sets both ends' from the
		// dialler's port alone.
		if q.portMTU, err = q.id.PortMTU(); err != nil {
			return nil, err
		}
	}
	// Use what the device granted: inline data it cannot take would fail
	// every small post.
	if granted := int(q.qp.Caps().MaxInlineData); cfg.InlineThreshold > granted {
		cfg.InlineThreshold = granted
		if granted == 0 {
			cfg.InlineThreshold = ring.NoInline
		}
	}
	return ring.New(cfg, mrRegion(q.mrs[0]), mrRegion(q.mrs[1]), mrRegion(q.mrs[2]))
}

// postInitialRecvs puts the engine's first receives on the queue: they must
// be there before the peer can send, so before connect or accept.
func postInitialRecvs(q *verbsQP, eng *ring.Engine) error {
	_, err := q.member.Step(eng.PostRecvs(nil), nil, nil, 0)
	return err
}

// connParam is the request's or reply's parameters: rsocket's, with the
// engine's private data saying this side's port MTU (portMTU bytes, 0 on
// iWARP), and the peer's port MTU read from its own.
func connParam(eng *ring.Engine, iwarp bool, t transportSettings, portMTU int) cm.ConnParam {
	pd := eng.LocalConnData()
	ring.SetPortMTU(&pd, portMTU)
	p := cm.RsocketConnParam(pd[:])
	p.RetryCount, p.RNRRetryCount = t.retryCount, t.rnrRetryCount
	p.PeerMTU = peerPortMTU
	if iwarp {
		p.InitiatorDepth = 1
	}
	return p
}

// peerPortMTU is the port MTU the peer's private data says, in bytes, or 0
// (C rsocket says none).
func peerPortMTU(privateData []byte) int {
	c, err := ring.DecodeConnData(privateData)
	if err != nil {
		return 0 // Establish rejects it
	}
	return c.PortMTUBytes()
}

// onIWARP reports whether addr is served by an iWARP device, whose
// connections take TCP ports: it binds a connection-manager id to it and
// asks the device.
func onIWARP(addr netip.Addr) bool {
	if addr.IsUnspecified() {
		return false // several devices may serve it; the caller's error stands
	}
	ch, err := cm.NewEventChannel()
	if err != nil {
		return false
	}
	defer ch.Close()
	id, err := ch.NewID()
	if err != nil {
		return false
	}
	defer id.Close()
	if id.Bind(netip.AddrPortFrom(addr, 0)) != nil {
		return false
	}
	ctx, err := id.Context()
	if err != nil {
		return false
	}
	info, err := ctx.Query()
	return err == nil && info.Transport == verbs.TransportIWARP
}
