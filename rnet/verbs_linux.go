//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// verbsQP is a queuePair on a real device: an rdma_cm id with its own event
// channel, an RC queue pair, one CQ on a completion channel, and the three
// registered regions the engine works in.
type verbsQP struct {
	ch     *cm.EventChannel
	id     *cm.ID
	pd     *verbs.PD
	cc     *verbs.CompChannel
	cq     *verbs.CQ
	qp     *verbs.QP
	mrs    []*verbs.MR // send, recv, target
	device string
	// accepting says this is the listening side (for testHookSetupStep).
	accepting bool

	laddr, raddr net.Addr

	kicked         atomic.Bool
	eventsDone     chan struct{}
	eventsStop     chan struct{} // closed by shutdown: ends a retry's wait
	startOnce      sync.Once
	disconnectOnce sync.Once
	shutdownOnce   sync.Once
}

// The engine's work requests and completions have the same memory layout as
// verbs' (checked by TestLayoutMatchesVerbs), so slices pass straight through.
func asVerbsSends(w []ring.SendWR) []verbs.SendWR {
	return unsafe.Slice((*verbs.SendWR)(unsafe.Pointer(unsafe.SliceData(w))), len(w))
}

func asVerbsRecvs(w []ring.RecvWR) []verbs.RecvWR {
	return unsafe.Slice((*verbs.RecvWR)(unsafe.Pointer(unsafe.SliceData(w))), len(w))
}

func asVerbsCompletions(c []ring.Completion) []verbs.Completion {
	return unsafe.Slice((*verbs.Completion)(unsafe.Pointer(unsafe.SliceData(c))), len(c))
}

func (q *verbsQP) postSend(wrs []ring.SendWR) error {
	_, err := q.qp.PostSend(asVerbsSends(wrs))
	return err
}

func (q *verbsQP) postRecv(wrs []ring.RecvWR) error {
	_, err := q.qp.PostRecv(asVerbsRecvs(wrs))
	return err
}

func (q *verbsQP) poll(out []ring.Completion) (int, error) {
	return q.cq.Poll(asVerbsCompletions(out))
}

func (q *verbsQP) postPoll(recvs []ring.RecvWR, sends []ring.SendWR, out []ring.Completion) (int, error) {
	return q.qp.PostAndPoll(q.cq, asVerbsRecvs(recvs), asVerbsSends(sends), asVerbsCompletions(out))
}

func (q *verbsQP) postPollTries(recvs []ring.RecvWR, sends []ring.SendWR, out []ring.Completion, tries int) (int, error) {
	return q.qp.PostAndPollTries(q.cq, asVerbsRecvs(recvs), asVerbsSends(sends), asVerbsCompletions(out), tries)
}

func (q *verbsQP) armPostPoll(recvs []ring.RecvWR, sends []ring.SendWR, out []ring.Completion) (int, error) {
	return q.qp.ArmPostAndPoll(q.cq, asVerbsRecvs(recvs), asVerbsSends(sends), asVerbsCompletions(out))
}

func (q *verbsQP) takePostPoll(recvs []ring.RecvWR, sends []ring.SendWR, out []ring.Completion) (int, error) {
	return q.qp.TakeEventArmPostAndPoll(q.cq, asVerbsRecvs(recvs), asVerbsSends(sends), asVerbsCompletions(out))
}

func (q *verbsQP) wakesPeer() bool { return false }

func (q *verbsQP) wait() (parked bool, err error) {
	if q.kicked.Swap(false) {
		q.cc.SetDeadline(time.Time{})
		return false, nil
	}
	parked, err = q.cc.WaitReady(context.Background())
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// kick's way in: a past deadline on the channel's fd.
		q.cc.SetDeadline(time.Time{})
		q.kicked.Store(false)
		return parked, nil
	}
	return parked, err
}

// kick sets the flag before the deadline, and wait clears the deadline before
// the flag, so a kick racing with a wait either finds the wait parked or is
// seen by its caller's next look at the connection.
func (q *verbsQP) kick() {
	if !q.kicked.Swap(true) {
		q.cc.SetDeadline(aLongTimeAgo)
	}
}

var aLongTimeAgo = time.Unix(1, 0)

func (q *verbsQP) start(h eventHandler) {
	q.startOnce.Do(func() {
		q.eventsDone = make(chan struct{})
		q.eventsStop = make(chan struct{})
		go q.events(h)
	})
}

// events delivers the connection manager's news about this connection.
func (q *verbsQP) events(h eventHandler) {
	defer close(q.eventsDone)
	var retry eventRetry
	for {
		ev, err := q.ch.Next(context.Background())
		if errors.Is(err, net.ErrClosed) {
			return // shutdown closed the channel
		}
		if err != nil {
			// Keep listening: a disconnect or a device removal must
			// still reach the connection.
			retry.wait(q.eventsStop)
			continue
		}
		retry.reset()
		switch ev.Type {
		case cm.EventDisconnected:
			h.transportDisconnected()
		case cm.EventDeviceRemoval:
			h.transportFailed(fmt.Errorf("%w: %s", ErrDeviceRemoved, q.device))
		}
	}
}

func (q *verbsQP) disconnect() {
	q.disconnectOnce.Do(func() { q.id.Disconnect() })
}

func (q *verbsQP) shutdown() {
	q.shutdownOnce.Do(func() {
		if q.eventsStop != nil {
			close(q.eventsStop)
		}
		q.cc.Close()
		q.ch.Close()
		if q.eventsDone != nil {
			<-q.eventsDone
		}
	})
}

// release destroys everything in dependency order: the QP before its CQ, the
// CQ before its channel, memory regions and PD before the id that owns the
// device context, and the id before its event channel.
func (q *verbsQP) release() error {
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if q.qp != nil {
		keep(q.qp.Close())
	}
	if q.cq != nil {
		keep(q.cq.Close())
	}
	if q.cc != nil {
		keep(q.cc.Close())
	}
	for _, mr := range q.mrs {
		keep(mr.Close())
	}
	if q.pd != nil {
		keep(q.pd.Close())
	}
	if q.id != nil {
		keep(q.id.Close())
	}
	if q.ch != nil {
		keep(q.ch.Close())
	}
	return errors.Join(errs...)
}

func (q *verbsQP) localAddr() net.Addr  { return q.laddr }
func (q *verbsQP) remoteAddr() net.Addr { return q.raddr }

// testHookSetupStep, set only by tests, is called as each resource of a
// connection is made (by the accepting side or the dialling one), and
// fails the setup where it returns an error, as a device refusing that
// resource would: the error paths release what they made, and tests check
// it.
// Atomic: the acceptor's goroutines read it while a test sets it.
var testHookSetupStep atomic.Pointer[func(accepting bool, step string) error]

func setupStep(accepting bool, step string) error {
	if hook := testHookSetupStep.Load(); hook != nil {
		return (*hook)(accepting, step)
	}
	return nil
}

// setup creates the queue pair, CQ and registered regions for id, which must be
// bound to a device (resolved, or from a connection request), and the engine
// over them. On failure everything made so far is released, except id and ch.
func setup(id *cm.ID, ch *cm.EventChannel, cfg ring.Config, accepting bool) (*verbsQP, *ring.Engine, error) {
	q := &verbsQP{ch: ch, id: id, accepting: accepting}
	eng, err := q.build(cfg)
	if err != nil {
		q.id, q.ch = nil, nil // the caller owns these on failure
		q.release()
		return nil, nil, err
	}
	q.laddr = netAddr(id.LocalAddr())
	q.raddr = netAddr(id.RemoteAddr())
	return q, eng, nil
}

func (q *verbsQP) build(cfg ring.Config) (*ring.Engine, error) {
	ctx, err := q.id.Context()
	if err != nil {
		return nil, err
	}
	q.device = ctx.Name()
	info, err := ctx.Query()
	if err != nil {
		return nil, err
	}
	cfg.IWARP = info.Transport == verbs.TransportIWARP
	// Queue depths the device cannot give are clamped rather than failed,
	// as rsocket does.
	if info.MaxQPWR > 0 {
		cfg.SQSize = min(cfg.SQSize, info.MaxQPWR)
		cfg.RQSize = min(cfg.RQSize, info.MaxQPWR-ring.RecvHeadroom)
	}
	cfg = cfg.Normalize()
	layout := cfg.Layout()
	if q.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if err := setupStep(q.accepting, "pd"); err != nil {
		return nil, err
	}
	// Only the receive ring and the target SGL are remotely writable, and
	// nothing is remotely readable: the peer can never see our send ring.
	for _, r := range []struct {
		size   int
		access verbs.Access
	}{
		{layout.SendRegion, verbs.AccessLocalWrite},
		{layout.RecvRegion, verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
		{layout.TargetRegion, verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
	} {
		mr, err := q.pd.RegisterMR(r.size, r.access)
		if err != nil {
			return nil, err
		}
		q.mrs = append(q.mrs, mr)
		if err := setupStep(q.accepting, fmt.Sprintf("mr%d", len(q.mrs)-1)); err != nil {
			return nil, err
		}
	}
	if q.cc, err = ctx.NewCompChannel(); err != nil {
		return nil, err
	}
	if err := setupStep(q.accepting, "comp channel"); err != nil {
		return nil, err
	}
	if q.cq, err = ctx.NewCQ(layout.CQDepth, q.cc); err != nil {
		return nil, err
	}
	if err := setupStep(q.accepting, "cq"); err != nil {
		return nil, err
	}
	inline := cfg.InlineThreshold
	if inline < 0 {
		inline = 0
	}
	if cfg.IWARP {
		inline = max(inline, ring.MsgWordSize)
	}
	if q.qp, err = q.id.CreateQP(q.pd, q.cq, q.cq, verbs.QPCaps{
		MaxSendWR:     uint32(layout.SendDepth),
		MaxRecvWR:     uint32(layout.RecvDepth),
		MaxSendSGE:    uint32(layout.MaxSendSGE),
		MaxRecvSGE:    uint32(max(layout.MaxRecvSGE, 1)),
		MaxInlineData: uint32(inline),
	}); err != nil {
		return nil, err
	}
	if err := setupStep(q.accepting, "qp"); err != nil {
		return nil, err
	}
	// Use what the device granted: inline data it cannot take would fail
	// every small post.
	if granted := int(q.qp.Caps().MaxInlineData); cfg.InlineThreshold > granted {
		cfg.InlineThreshold = granted
		if granted == 0 {
			cfg.InlineThreshold = ring.NoInline
		}
	}
	region := func(mr *verbs.MR) ring.Region {
		return ring.Region{Buf: mr.Bytes(), Addr: mr.Addr(), LKey: mr.LKey(), RKey: mr.RKey()}
	}
	return ring.New(cfg, region(q.mrs[0]), region(q.mrs[1]), region(q.mrs[2]))
}

// postInitialRecvs puts the engine's first receives on the queue: they must
// be there before the peer can send, so before connect or accept.
func postInitialRecvs(q *verbsQP, eng *ring.Engine) error {
	recvs := eng.PostRecvs(nil)
	return q.postRecv(recvs)
}

func connParam(eng *ring.Engine, iwarp bool) cm.ConnParam {
	pd := eng.LocalConnData()
	p := cm.RsocketConnParam(pd[:])
	if iwarp {
		p.InitiatorDepth = 1
	}
	return p
}

func dial(ctx context.Context, set settings, laddr netip.Addr, raddr netip.AddrPort) (c *Conn, err error) {
	remote := netAddr(raddr)
	var local net.Addr
	if laddr.IsValid() {
		local = netAddr(netip.AddrPortFrom(laddr, 0))
	}
	fail := func(err error) (*Conn, error) { return nil, dialError(ctx, local, remote, err) }
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
	if err := id.Resolve(ctx, laddr, raddr, cm.RsocketRetry); err != nil {
		id.Close()
		ch.Close()
		return fail(err)
	}
	q, eng, err := setup(id, ch, set.ring, false)
	if err != nil {
		id.Close()
		ch.Close()
		return fail(err)
	}
	local = q.laddr
	abort := func(err error) (*Conn, error) {
		q.disconnect()
		q.shutdown()
		q.release()
		return fail(err)
	}
	if err := postInitialRecvs(q, eng); err != nil {
		return abort(err)
	}
	if err := id.Connect(connParam(eng, eng.Config().IWARP)); err != nil {
		return abort(err)
	}
	ev, err := id.Await(ctx, cm.EventEstablished)
	if err != nil {
		return abort(err)
	}
	if err := eng.Establish(ev.Param.PrivateData); err != nil {
		return abort(err)
	}
	return newConn(q, eng, set), nil
}

func listen(set settings, network string, laddr netip.AddrPort, backlog int) (*Listener, error) {
	addr := netAddr(laddr)
	fail := func(err error) (*Listener, error) {
		return nil, &net.OpError{Op: "listen", Net: "rdma", Addr: addr, Err: err}
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
	if err := id.Listen(backlog); err != nil {
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
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{
		addr:   addr,
		conns:  make(chan *Conn, backlog),
		done:   make(chan struct{}),
		failed: make(chan struct{}),
	}
	a := &acceptor{l: l, ch: ch, id: id, device: device, set: set, ctx: ctx, slots: make(chan struct{}, backlog)}
	l.stop = func() {
		cancel()
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
	slots  chan struct{}   // bounds concurrent handshakes
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
			a.l.fail(fmt.Errorf("%w: %s", ErrDeviceRemoved, a.device))
			return
		}
		if ev.Type != cm.EventConnectRequest {
			// Every other id on this channel was handed over below before
			// this loop read on: nothing is left here for them.
			continue
		}
		select {
		case a.slots <- struct{}{}:
		default:
			// Too many handshakes at once: refuse, as a full TCP backlog would.
			ev.ID.Reject(nil)
			ev.ID.Close()
			continue
		}
		ch, ok := a.handOver(ev)
		if !ok {
			<-a.slots
			continue
		}
		a.wg.Add(1)
		go a.handshake(ev, ch)
	}
}

// handOver gives a requesting id its own event channel, or refuses it. It
// runs in the loop, before the next read: the kernel moves the events it
// holds for the id along with it, so none can be read here first and lost
// (a REJ or DISCONNECTED that came before the handshake's own wait began
// would otherwise leave that wait to the handshake timeout).
func (a *acceptor) handOver(ev cm.Event) (*cm.EventChannel, bool) {
	id := ev.ID
	// rsocket refuses a request whose private data it cannot use; so do
	// we, before spending any memory on it.
	if _, err := ring.DecodeConnData(ev.Param.PrivateData); err != nil {
		id.Reject(nil)
		id.Close()
		return nil, false
	}
	ch, err := cm.NewEventChannel()
	if err != nil {
		id.Reject(nil)
		id.Close()
		return nil, false
	}
	err = id.Migrate(ch)
	if err == nil {
		err = setupStep(true, "migrate")
	}
	if err != nil {
		id.Reject(nil)
		id.Close()
		ch.Close()
		return nil, false
	}
	return ch, true
}

// handshake accepts one connection request, whose id is already alone on
// ch. Any failure refuses or drops this request only.
func (a *acceptor) handshake(ev cm.Event, ch *cm.EventChannel) {
	defer a.wg.Done()
	defer func() { <-a.slots }()
	id := ev.ID
	q, eng, err := setup(id, ch, a.set.ring, true)
	if err != nil {
		id.Reject(nil)
		id.Close()
		ch.Close()
		return
	}
	drop := func() {
		q.disconnect()
		q.shutdown()
		q.release()
	}
	if err := eng.Establish(ev.Param.PrivateData); err != nil {
		id.Reject(nil)
		drop()
		return
	}
	if err := postInitialRecvs(q, eng); err != nil {
		id.Reject(nil)
		drop()
		return
	}
	// Echo the request's parameters, as rsocket does, with our private data.
	p := ev.Param
	p.PrivateData = connParam(eng, false).PrivateData
	if err := id.Accept(p); err != nil {
		drop()
		return
	}
	// The clock starts at the reply, not at the request: setting up many
	// connections at once takes a while under load, and the dialer counts
	// itself connected as soon as it has our reply.
	ctx, cancel := a.ctx, context.CancelFunc(func() {})
	if a.set.handshakeTimeout > 0 {
		ctx, cancel = context.WithTimeout(a.ctx, a.set.handshakeTimeout)
	}
	defer cancel()
	if _, err := id.Await(ctx, cm.EventEstablished); err != nil {
		drop()
		return
	}
	a.l.offer(newConn(q, eng, a.set))
}

// eventRetry paces the retries of an event loop whose channel failed with
// something other than being closed (an errno from rdma_get_cm_event, such
// as ENOMEM): such a loop must neither spin on a failure that persists nor
// stop listening for good. The waits double from 5 ms to at most 1 s.
type eventRetry struct{ delay time.Duration }

// wait waits out the next delay, or until done is closed.
func (r *eventRetry) wait(done <-chan struct{}) {
	r.delay = min(max(2*r.delay, 5*time.Millisecond), time.Second)
	t := time.NewTimer(r.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-done:
	}
}

// reset starts over after an event came through.
func (r *eventRetry) reset() { r.delay = 0 }
