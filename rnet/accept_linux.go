//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/stream"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// kernelListenBacklog is the listening id's backlog in the kernel, the
// connection requests it queues for the acceptor to read: as many as the
// kernel allows (net.rdma_ucm.max_backlog caps it, 1024 by default). The
// acceptor reads each at once and applies the listener's own bounds
// (Backlog, MaxPendingHandshakes), refusing with a reason the dialer reads.
// A request past the kernel's backlog is instead dropped without a word,
// so that its dialer's connection manager sends it again, about 4 s later:
// with Backlog there, a burst of requests that came while the acceptor was
// not running (a hundred resumes after a wire cut, say) lost that long.
const kernelListenBacklog = maxBacklog

// listen binds a listening id to laddr and starts its acceptor.
func listen(set settings, network string, laddr netip.AddrPort, backlog, maxPending int, handshakeError func(net.Addr, error)) (*Listener, error) {
	addr := netAddr(laddr)
	fail := func(err error) (*Listener, error) {
		return nil, &net.OpError{Op: "listen", Net: "rdma", Addr: addr, Err: err}
	}
	if set.transportErr != nil {
		return fail(set.transportErr)
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
	if err := bindListener(id, network, laddr); err != nil {
		id.Close()
		ch.Close()
		return fail(err)
	}
	if err := id.Listen(kernelListenBacklog); err != nil {
		id.Close()
		ch.Close()
		return fail(err)
	}
	if a := id.LocalAddr(); a.IsValid() {
		addr = netAddr(a)
	}
	device := "" // a wildcard listener is on no device, and outlives any one
	if !laddr.Addr().IsUnspecified() {
		if vctx, err := id.Context(); err == nil {
			device = vctx.Name()
		}
	}
	var resumes *resumeListener
	if set.resume { // a listener without the switch reads no device list or limit for it
		_, v6only, _ := bindAddr(network, laddr)
		if resumes, err = newResumeListener(set, id.LocalAddr(), v6only, memlockLimit(), hostAddrs(laddr)); err != nil {
			id.Close()
			ch.Close()
			return fail(err)
		}
	}
	if maxPending == 0 {
		maxPending = defaultMaxPending(set.ring, device != "" && !onIWARP(laddr.Addr()))
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{
		addr:           addr,
		conns:          make(chan *Conn, backlog),
		done:           make(chan struct{}),
		failed:         make(chan struct{}),
		handshakeError: handshakeError,
		log:            logFor(set.logger),
		acceptDL:       stream.NewDeadline(func() {}),
		resume:         resumes,
	}
	l.requestsDone.L = &l.requestsMu
	a := &acceptor{l: l, ch: ch, id: id, device: device, set: set, ctx: ctx, resume: resumes,
		pending: newPendingHandshakes(maxPending, min(backlog, lineSlotsPerSlot*maxPending), stalledHandshakeAfter)}
	l.counts.pending = a.pending
	l.stop = func() {
		cancel()
		a.pending.close()
		ch.Close()
		a.wg.Wait()
		id.Close()
	}
	a.wg.Add(1)
	go a.run()
	return newListener(l), nil
}

// bindListener binds a listening id as bindAddr says: a wildcard on "rdma"
// takes IPv6 and IPv4 requests, falling back to IPv4 alone on a kernel
// without IPv6, as net.Listen does.
func bindListener(id *cm.ID, network string, laddr netip.AddrPort) error {
	bind, v6only, dual := bindAddr(network, laddr)
	if !bind.Addr().Is6() || !bind.Addr().IsUnspecified() {
		return id.Bind(bind)
	}
	err := id.SetAFOnly(v6only)
	if err == nil {
		err = id.Bind(bind)
	}
	if err != nil && dual && (errors.Is(err, syscall.EAFNOSUPPORT) || errors.Is(err, syscall.EADDRNOTAVAIL)) {
		return id.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), bind.Port()))
	}
	return err
}

// acceptor turns connection requests on a listening id into Conns.
type acceptor struct {
	l      *listener
	ch     *cm.EventChannel
	id     *cm.ID
	device string // the device a listener on one address is bound to
	set    settings
	ctx    context.Context // cancelled by Listener.Close
	// pending bounds the requests being set up or waiting for their
	// dialer's RTU, and so the memory they pin, and those in line for a
	// slot (see pendingHandshakes).
	pending *pendingHandshakes
	// resume is the listener's side of the resume extension, nil with
	// the switch off.
	resume *resumeListener
	wg     sync.WaitGroup
}

func (a *acceptor) run() {
	defer a.wg.Done()
	var retry eventRetry
	for {
		ev, err := a.ch.Next(context.Background())
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			retry.wait(a.ctx.Done())
			continue
		}
		retry.reset()
		if ev.Type == cm.EventDeviceRemoval && ev.ID == a.id {
			// The listening id is dead: it will never see another
			// request, even if a device of that name comes back. Accept
			// says so instead of blocking for ever; Close releases it.
			watchRemoval(a.device)
			a.l.fail(fmt.Errorf("%w: %s", ErrDeviceRemoved, a.device))
			return
		}
		if ev.Type != cm.EventConnectRequest {
			// Every other id on this channel was handed over below before
			// this loop read on: nothing is left here for them.
			continue
		}
		a.l.requestBegan()
		// A resume request's token is checked before the request may take
		// a slot or any memory: a stranger's costs this listener a hash
		// and a lookup, and its reject.
		sc, err := a.resume.screen(ev.Param.PrivateData)
		if err != nil {
			a.refuse(ev.ID, err)
			continue
		}
		if sc.resume != nil {
			a.startResume(ev, *sc.resume)
			continue
		}
		offer := sc.offer
		slot, err := a.l.admit(a.pending, ev.Param.PrivateData)
		if err != nil {
			a.refuse(ev.ID, err)
			continue
		}
		ch, ok := a.handOver(ev)
		if !ok {
			slot.release()
			a.l.requestEnded()
			continue
		}
		a.wg.Add(1)
		go a.handshake(ev, ch, slot, offer)
	}
}

// handOver gives a requesting id its own event channel, or refuses it. It
// runs in the loop, before the next read: the kernel moves the events it
// holds for the id along with it, so none can be read here first and lost
// (a REJ or DISCONNECTED that came before the handshake's own wait began
// would otherwise leave that wait to the handshake timeout).
func (a *acceptor) handOver(ev cm.Event) (*cm.EventChannel, bool) {
	id := ev.ID
	ch, err := cm.NewEventChannel()
	if err != nil {
		a.reject(id, err)
		id.Close()
		return nil, false
	}
	err = id.Migrate(ch)
	if err == nil {
		err = setupStage(true, "migrate")
	}
	if err != nil {
		a.reject(id, err)
		id.Close()
		ch.Close()
		return nil, false
	}
	return ch, true
}

// handshake accepts one connection request, whose id is already alone on
// ch, in the pending slot it was given. Any failure refuses or drops this
// request only. offer says the request offered the resume extension and
// the listener takes offers.
func (a *acceptor) handshake(ev cm.Event, ch *cm.EventChannel, slot *pendingSlot, offer bool) {
	defer a.wg.Done()
	defer a.l.requestEnded()
	// Released last: the slot's next holder may pin memory only once this
	// request's is unpinned.
	defer slot.release()
	id := ev.ID
	if !slot.wait(a.ctx.Done()) {
		a.reject(id, net.ErrClosed) // Listener.Close
		id.Close()
		ch.Close()
		return
	}
	// A request that waited in line checks the backlog again now that it
	// holds a slot: the connections waiting for room in the backlog must
	// never outnumber the slots, or they would pin more than the bound.
	if a.l.backlogFull() {
		a.reject(id, errBacklogFull)
		id.Close()
		ch.Close()
		return
	}
	nego, err := a.resume.begin(offer)
	if err != nil {
		a.reject(id, err)
		id.Close()
		ch.Close()
		return
	}
	defer nego.end() // a failure forgets the token
	q, eng, err := setup(id, ch, nego.ringConfig(a.set.ring), a.set.transport, true)
	if err != nil {
		a.reject(id, err)
		id.Close()
		ch.Close()
		return
	}
	drop := func() {
		q.Disconnect()
		q.Shutdown()
		q.Destroy()
	}
	if err := eng.Establish(ev.Param.PrivateData); err != nil {
		a.reject(id, err)
		drop()
		return
	}
	if err := postInitialRecvs(q, eng); err != nil {
		a.reject(id, err)
		drop()
		return
	}
	// Echo the request's parameters, as rsocket does, with our private data
	// and how often the dialler may resend to our receive queue; the
	// queue pair's path MTU is at most the dialler's port's, as its
	// request says.
	p := ev.Param
	ours := connParam(eng, false, a.set.transport, q.portMTU)
	p.PeerMTU = ours.PeerMTU
	if p.PrivateData, err = nego.reply(ours.PrivateData, id.LocalAddr().Addr(), q.device); err != nil {
		a.reject(id, err)
		drop()
		return
	}
	p.RNRRetryCount = a.set.transport.rnrRetryCount
	if err := id.Accept(p); err != nil {
		a.dropped(id, err)
		drop()
		return
	}
	// The clock starts at the reply, not at the request: setting up many
	// connections at once takes a while under load, and the dialer counts
	// itself connected as soon as it has our reply.
	var ctx context.Context
	var cancel context.CancelFunc
	if a.set.handshakeTimeout > 0 {
		ctx, cancel = context.WithTimeout(a.ctx, a.set.handshakeTimeout)
	} else {
		ctx, cancel = context.WithCancel(a.ctx)
	}
	defer cancel()
	// From here a newer request may take this one's slot: cancel ends
	// the wait.
	slot.replied(cancel)
	_, err = id.Await(ctx, cm.EventEstablished)
	if !slot.established(err == nil) {
		err = errEvicted // a newer request cancelled the wait
	}
	if err != nil {
		a.dropped(id, err)
		drop()
		return
	}
	// Established: the slot is free for the next request now, not when
	// Accept takes the connection.
	slot.release()
	a.l.offer(nego.conn(q, eng, a.set))
}

// refuse rejects the request on id because of err and releases the id.
func (a *acceptor) refuse(id *cm.ID, err error) {
	a.reject(id, err)
	id.Close()
	a.l.requestEnded()
}

// reject rejects the request on id because of err, telling a dialer that is
// rnet why (see rejectReason), and tells the HandshakeError hook.
func (a *acceptor) reject(id *cm.ID, err error) {
	id.Reject(rejectReasonOf(err).encode())
	a.report(id, err, true)
}

// dropped tells the HandshakeError hook that the request on id failed with
// err after our reply.
func (a *acceptor) dropped(id *cm.ID, err error) { a.report(id, err, false) }

// report tells the HandshakeError hook that the request on id was refused
// or dropped because of err; not while the listener closes, whose own
// Close ends the handshakes.
func (a *acceptor) report(id *cm.ID, err error, refused bool) {
	if a.ctx.Err() == nil {
		device := a.device
		if device == "" {
			if vctx, err := id.Context(); err == nil {
				device = vctx.Name()
			}
		}
		a.l.handshakeFailed(netAddr(id.RemoteAddr()), device, err, refused)
	}
}

// memlockLimit is what this process may pin: RLIMIT_MEMLOCK's soft limit
// in bytes, or noMemlockLimit if it is unlimited, cannot be read, or does
// not apply (CAP_IPC_LOCK in the initial user namespace). A listener reads
// it once, when it starts: a later setrlimit does not resize its table.
func memlockLimit() uint64 {
	limit, exempt, ok := verbs.LockedMemoryLimit()
	if !ok {
		return noMemlockLimit
	}
	return pinnable(limit, exempt)
}

// hostAddrs lists the host's RDMA devices and their addresses on this
// network namespace's interfaces, for the replies of a wildcard listener at
// laddr (none for another listener, or if the devices cannot be listed).
// An address is listed once, under the first device that has it.
func hostAddrs(laddr netip.AddrPort) []hostDevice {
	if !laddr.Addr().IsUnspecified() {
		return nil
	}
	infos, err := verbs.Devices()
	if err != nil {
		return nil
	}
	ifaces := hostInterfaces()
	seen := make(map[netip.Addr]bool)
	var out []hostDevice
	for _, d := range infos {
		addrs, err := findDeviceAddrs(infos, nil, d.Name, ifaces)
		if err != nil {
			continue
		}
		hd := hostDevice{name: d.Name}
		for _, ip := range addrs {
			if !seen[ip] {
				seen[ip] = true
				hd.addrs = append(hd.addrs, ip)
			}
		}
		out = append(out, hd)
	}
	return namespaceAddrs(out, ifaces)
}
