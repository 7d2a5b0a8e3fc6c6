//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/stream"
)

// dialResumer is the dialer's stream.Resumer of one agreed connection: it
// connects again, with the listener's latest token, to the listener's
// addresses and the one dialled, through whatever local device routes
// there.
type dialResumer struct {
	set     settings
	dialled netip.AddrPort
	// local is the connection's first local address, which a resume over
	// TCP comes from (resume_tcp_linux.go).
	local netip.Addr

	mu sync.Mutex
	// agreed is the listener's latest reply: a resume's reply replaces
	// the token and addresses, whether or not that resume then completes,
	// since the listener takes either token until one is committed.
	// Guarded by mu.
	agreed resumeAgreement
	// device is the local device of the path in use. Guarded by mu.
	device string
	// failed are the devices whose paths failed in use, which a resume
	// tries last for a while. Guarded by mu.
	failed failedDevices
	// gen numbers the attempts whose replies may replace agreed: a TCP
	// attempt starts a new one, so that a cancelled RDMA attempt's late
	// reply cannot replace the token the listener gave over TCP, which
	// replaced the RDMA attempt there. Guarded by mu.
	gen uint64
}

func newDialResumer(set settings, dialled netip.AddrPort, local netip.Addr, agreed *resumeAgreement, device string) *dialResumer {
	r := &dialResumer{set: set, dialled: dialled, local: local, agreed: *agreed, device: device}
	if !r.agreed.reached.IsValid() {
		r.agreed.reached = dialled
	}
	return r
}

// Forget does nothing: the dialer holds only the token, which is worth
// nothing once the listener has forgotten the connection.
func (r *dialResumer) Forget() {}

// ExchangeWait bounds a new path's wait for the listener's exchange
// (stream.ExchangeWaiter; see resumeExchangeWait), on RDMA only: over TCP
// our send completes once the local socket took it, which says nothing of
// the listener, and there is no RTU to lose.
func (r *dialResumer) ExchangeWait(left time.Duration) time.Duration {
	r.mu.Lock()
	overTCP := r.device == ""
	r.mu.Unlock()
	if overTCP {
		return 0
	}
	return resumeExchangeWait(left)
}

func (r *dialResumer) latest() resumeAgreement {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.agreed
}

// pathFailed records the failure that req reports and returns the devices
// a resume now tries last, ranked (see failedDevices.recent).
func (r *dialResumer) pathFailed(req stream.ResumeRequest) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if req.NewPathErr == nil {
		r.failed = r.failed.note(r.device, now)
	}
	return r.failed.recent(now, failedDeviceMemory(r.set.resumeTimeout))
}

func (r *dialResumer) moved(device string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.device = device
}

// replied records the listener's reply from to to an attempt of
// generation gen, unless a later generation has begun.
func (r *dialResumer) replied(gen uint64, rep resume.Reply, to netip.AddrPort) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen == r.gen {
		r.agreed = agreementOf(rep, to)
	}
}

// generation returns the current generation of attempts; next begins a
// new one and returns it.
func (r *dialResumer) generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

func (r *dialResumer) next() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	return r.gen
}

// resumeRoute is a connection-manager id with a route to one of the
// listener's addresses, on an event channel of its own.
type resumeRoute struct {
	ch *cm.EventChannel
	id *cm.ID
}

func (rt resumeRoute) release() {
	rt.id.Close()
	rt.ch.Close()
}

// device is the local device the route leaves through, "" if unknown.
func (rt resumeRoute) device() string {
	ctx, err := rt.id.Context()
	if err != nil {
		return ""
	}
	return ctx.Name()
}

// Resume connects to the listener again for the connection whose path
// failed (stream.Resumer).
func (r *dialResumer) Resume(ctx context.Context, req stream.ResumeRequest) (stream.QueuePair, *ring.Engine, error) {
	failed, gen := r.pathFailed(req), r.generation()
	paths := resumePaths[resumeRoute, resumedPath]{
		resolve: r.resolve,
		connect: func(ctx context.Context, to netip.AddrPort, rt resumeRoute) (resumedPath, error) {
			return r.connect(ctx, to, rt, req, gen)
		},
		release: resumeRoute.release,
		drop:    resumedPath.close,
		avoid:   func(rt resumeRoute) int { return failed[rt.device()] },
		device:  resumeRoute.device,
	}
	// A Resume called again after a new path failed has less than the
	// whole ResumeTimeout left.
	budget, overTCP := r.set.resumeTimeout, r.set.tcpResume && r.latest().tcp
	if deadline, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(deadline))
	}
	if overTCP {
		budget -= tcpResumeShare(budget)
	}
	latest := r.latest()
	addrs := resumeCandidates(latest.addrs, latest.reached, r.dialled)
	if hook := testHookResumeCandidates.Load(); hook != nil {
		addrs = (*hook)(addrs)
	}
	var p resumedPath
	var err error
	if overTCP {
		p, err = r.raceThenTCP(ctx, paths, addrs, budget, req)
	} else {
		p, err = paths.race(ctx, addrs, budget)
	}
	if err != nil {
		return nil, nil, err
	}
	device := ""
	if q, ok := p.qp.(*verbsQP); ok {
		device = q.device
	}
	r.moved(device)
	return p.qp, p.eng, nil
}

// raceThenTCP races addrs over RDMA for budget, then, if no RDMA path
// came and the listener has not forgotten the connection, resumes over TCP:
// from the race's deadline on, while the race still lets go of what it
// made (queue pairs a device is slow to destroy), which would otherwise
// eat the time TCP has.
func (r *dialResumer) raceThenTCP(ctx context.Context, paths resumePaths[resumeRoute, resumedPath], addrs []netip.AddrPort, budget time.Duration, req stream.ResumeRequest) (resumedPath, error) {
	type raced struct {
		p   resumedPath
		err error
	}
	done := make(chan raced, 1)
	raceCtx, cancelRace := context.WithCancelCause(ctx)
	defer cancelRace(nil)
	go func() {
		p, err := paths.race(raceCtx, addrs, budget)
		done <- raced{p, err}
	}()
	over := time.NewTimer(budget)
	defer over.Stop()
	var rdmaErr error
	select {
	case res := <-done:
		if res.err == nil || ctx.Err() != nil || errors.Is(res.err, errResumeForgotten) {
			return res.p, res.err
		}
		rdmaErr = res.err
	case <-over.C:
		select {
		case res := <-done: // it ended as its time did
			if res.err == nil || ctx.Err() != nil || errors.Is(res.err, errResumeForgotten) {
				return res.p, res.err
			}
			rdmaErr = res.err
		default:
			cancelRace(errRDMAShareOver)
		}
	}
	// No RDMA path is left: the last resort, in a generation of its own.
	p, err := r.connectTCP(ctx, req, r.next())
	if err == nil {
		if rdmaErr == nil {
			// The race still lets go of what it made, which can take
			// a device in software seconds: the stream goes on
			// meanwhile. A path it made as it was cancelled is one the
			// TCP path replaced at the listener.
			go func() {
				if res := <-done; res.err == nil {
					res.p.close()
				}
			}()
		}
		return p, nil
	}
	if rdmaErr == nil {
		res := <-done // the race ends soon, cancelled
		if res.err == nil {
			// Answered as it was cancelled, and TCP failed: the
			// listener's reply to it, ignored as of an older
			// generation, is the one to keep.
			r.adopt(res.p)
			return res.p, nil
		}
		rdmaErr = res.err
	}
	return resumedPath{}, tcpAttemptFailed(ctx, rdmaErr, r.dialled, err)
}

// errRDMAShareOver ends a race whose share of ResumeTimeout ran out, for
// the TCP attempt: its error says so rather than that it was cancelled.
var errRDMAShareOver = errors.New("the RDMA share of ResumeTimeout ran out")

// adopt records the reply of p, the path taken, whatever its generation.
func (r *dialResumer) adopt(p resumedPath) {
	if p.reply == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.agreed = agreementOf(*p.reply, p.to)
}

// resolve finds a route to the listener at to from any local device, as
// a dial without a local address does.
func (r *dialResumer) resolve(ctx context.Context, to netip.AddrPort) (resumeRoute, error) {
	ch, err := cm.NewEventChannel()
	if err != nil {
		return resumeRoute{}, err
	}
	id, err := ch.NewID()
	if err != nil {
		ch.Close()
		return resumeRoute{}, err
	}
	rt := resumeRoute{ch: ch, id: id}
	if n := r.set.transport.ackTimeout; n != 0 {
		err = id.SetAckTimeout(n)
	}
	if err == nil && r.set.transport.setTraffic {
		err = id.SetTOS(r.set.transport.trafficClass)
	}
	if err == nil {
		err = id.Resolve(ctx, netip.Addr{}, to, cm.RsocketRetry)
	}
	if err != nil {
		rt.release()
		return resumeRoute{}, err
	}
	return rt, nil
}

// connect sends the resume request on rt, a route to to, with a fresh
// queue pair and engine configured by req, and returns them once the
// listener has taken the request. It owns rt: on failure everything is
// released.
func (r *dialResumer) connect(ctx context.Context, to netip.AddrPort, rt resumeRoute, req stream.ResumeRequest, gen uint64) (resumedPath, error) {
	begun := time.Now()
	q, eng, err := setup(rt.id, rt.ch, req.Ring, r.set.transport.forResumedPath(), false)
	if err != nil {
		rt.release()
		return resumedPath{}, err
	}
	abort := func(err error) (resumedPath, error) {
		q.Disconnect()
		q.Shutdown()
		q.Destroy()
		return resumedPath{}, err
	}
	// The exchange goes first on the new queue pair: before Establish,
	// which lets the engine send.
	if err := eng.BeginResume(req.Own); err != nil {
		return abort(err)
	}
	if err := postInitialRecvs(q, eng); err != nil {
		return abort(err)
	}
	p := connParam(eng, eng.Config().IWARP, r.set.transport, q.portMTU)
	if p.PrivateData, err = resume.EncodeRequest(p.PrivateData, resume.Request{Kind: resume.Resume, Token: r.latest().token}); err != nil {
		return abort(err)
	}
	if err := rt.id.Connect(p); err != nil {
		return abort(err)
	}
	out := time.Now()
	ev, err := rt.id.Await(ctx, cm.EventEstablished)
	if err != nil {
		// Whether the time went to our own setup or to the answer.
		err = fmt.Errorf("%w (the request went out after %v of setup)", explainReject(err), out.Sub(begun).Round(time.Millisecond))
		var pe *peerRejectError
		if errors.As(err, &pe) && pe.reason.code == rejectResumeRefused {
			err = fmt.Errorf("%w: %w", errResumeForgotten, err)
		}
		return abort(err)
	}
	rep, ok, err := resume.ParseReply(ev.Param.PrivateData)
	if err != nil {
		return abort(err)
	}
	if !ok {
		// A C rsocket listener, or another program on the port, took the
		// request for a new connection.
		return abort(errors.New("the listener there does not know the connection: its reply does not resume it"))
	}
	r.replied(gen, rep, to)
	if err := eng.Establish(ev.Param.PrivateData); err != nil {
		return abort(err)
	}
	return resumedPath{qp: q, eng: eng, reply: &rep, to: to}, nil
}
