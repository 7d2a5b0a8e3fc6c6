//go:build linux && cgo

package rnet

import (
	"context"
	"fmt"
	"net"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
)

// startResume takes a resume request whose token the table took (attempt)
// into a handshake on its connection (see resume_handshake.go): it takes
// no pending-handshake slot and does not count against the backlog, since
// the connection it resumes was accepted long ago. Any failure before the
// RTU aborts the attempt in the table; the connection stays suspended,
// both tokens valid.
func (a *acceptor) startResume(ev cm.Event, attempt resume.Attempt[*resumeEntry]) {
	steps := startResumeSteps()
	// The table took this request's token in place of the older's: the
	// handshake under way, if any, ends whatever becomes of this one.
	hs := attempt.Value.claim(a.ctx)
	fail := func(err error) {
		a.resume.table.Abort(attempt)
		hs.release()
		a.refuse(ev.ID, err)
	}
	if _, err := ring.DecodeConnData(ev.Param.PrivateData); err != nil {
		fail(err)
		return
	}
	if !a.resume.takeHandshake() {
		fail(errHandshakesBusy)
		return
	}
	ch, ok := a.handOver(ev)
	if !ok {
		a.resume.table.Abort(attempt)
		hs.release()
		a.resume.handshakes.Add(-1)
		a.l.requestEnded()
		return
	}
	a.wg.Add(1)
	go a.handshakeResume(ev, ch, hs, attempt, steps)
}

// handshakeResume accepts a resume request, whose id is alone on ch, once
// no other handshake of its connection holds a path (hs): it waits for the
// connection's Resume call (telling the connection that its path failed,
// if it had not seen it), builds the new queue pair and engine from it,
// replies with a new token, and once the dialer's RTU has come commits the
// resume in the table and hands the path over. A newer request for the
// connection ends it at any step.
func (a *acceptor) handshakeResume(ev cm.Event, ch *cm.EventChannel, hs *resumeHandshake, attempt resume.Attempt[*resumeEntry], steps *resumeSteps) {
	defer a.wg.Done()
	defer a.l.requestEnded()
	defer a.resume.handshakes.Add(-1)
	defer hs.release()
	committed := false
	defer func() {
		if !committed {
			a.resume.table.Abort(attempt)
		}
	}()
	id := ev.ID
	if err := hs.acquire(); err != nil {
		if a.ctx.Err() != nil {
			err = net.ErrClosed // Listener.Close
		}
		a.reject(id, steps.wrap(err))
		id.Close()
		ch.Close()
		return
	}
	steps.mark("path free")
	remote := netAddr(id.RemoteAddr())
	bound := func() (context.Context, context.CancelFunc) {
		if a.set.handshakeTimeout > 0 {
			return context.WithTimeout(hs.ctx, a.set.handshakeTimeout)
		}
		return context.WithCancel(hs.ctx)
	}
	ctx, cancel := bound()
	w, err := attempt.Value.await(ctx, fmt.Errorf("rnet: the dialer resumed the connection from %v", remote))
	cancel()
	if err != nil {
		a.reject(id, steps.wrap(err))
		id.Close()
		ch.Close()
		return
	}
	steps.mark("Resume call")
	q, eng, err := setup(id, ch, w.req.Ring, a.set.transport.forResumedPath(), true)
	if err != nil {
		a.reject(id, steps.wrap(err))
		id.Close()
		ch.Close()
		return
	}
	steps.mark("queue pair built")
	path := resumedPath{qp: q, eng: eng}
	// The exchange goes first on the new queue pair: before Establish,
	// which lets the engine send.
	if err := eng.BeginResume(w.req.Own); err != nil {
		a.reject(id, steps.wrap(err))
		path.close()
		return
	}
	if err := eng.Establish(ev.Param.PrivateData); err != nil {
		a.reject(id, steps.wrap(err))
		path.close()
		return
	}
	if err := postInitialRecvs(q, eng); err != nil {
		a.reject(id, steps.wrap(err))
		path.close()
		return
	}
	p := ev.Param
	ours := connParam(eng, false, a.set.transport, q.portMTU)
	p.PeerMTU = ours.PeerMTU
	p.RNRRetryCount = a.set.transport.rnrRetryCount
	p.PrivateData, err = resume.EncodeReply(ours.PrivateData, resume.Reply{
		Version:  resume.Version,
		Lifetime: a.resume.table.Lifetime(),
		Token:    attempt.Token,
		Addrs:    replyAddrs(a.resume.devices, id.LocalAddr().Addr(), q.device),
		TCP:      a.resume.tcp.Load(),
	})
	if err == nil {
		// Replaced while it built: the dialer has moved on.
		err = hs.err()
	}
	if err != nil {
		a.reject(id, steps.wrap(err))
		path.close()
		return
	}
	if err := id.Accept(p); err != nil {
		a.dropped(id, steps.wrap(err))
		path.close()
		return
	}
	steps.mark("replied")
	ctx, cancel = bound()
	defer cancel()
	_, err = id.Await(ctx, cm.EventEstablished)
	if replaced := hs.err(); err != nil && replaced != nil {
		err = replaced
	}
	var newPath resume.Path
	if err == nil {
		steps.mark("RTU")
		// Fails if a newer request with the token replaced this one, or
		// the connection ended or expired meanwhile.
		newPath, err = a.resume.table.Commit(attempt)
	}
	if err != nil {
		a.dropped(id, steps.wrap(err))
		path.close()
		return
	}
	committed = true
	if !attempt.Value.hand(w, path, newPath) {
		a.dropped(id, steps.wrap(errResumeEnded))
		path.close()
	}
}
