//go:build linux && cgo

package rnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/stream"
	"github.com/rnet-dev/rnet/internal/tcpqp"
)

// Resuming over TCP, the last resort (docs/design.md, "Resuming over
// TCP"): a dialer with no RDMA path left connects to the DualListener's
// TCP side and resumes there with the same token and exchange; the stream
// then runs over internal/tcpqp. The TCP side looks at the first bytes of
// a connection only when it comes from the address of a connection the
// listener could resume, and for resumePeekTimeout at most, so that a
// protocol whose server speaks first waits only then.

// resumePeekTimeout bounds the TCP side's look at a connection's first
// bytes: the dialer writes its request as soon as it has connected, but a
// host whose connections all resume at once can be slow to (in the
// two-host lab, more than 1 s), and a resume request taken for a new
// connection would reach the application. While a connection from the
// same address waits for its dialer, the bound is the handshake's.
const resumePeekTimeout = 3 * time.Second

// maxResumePeeks bounds the connections the TCP side looks at, and the
// resume handshakes it runs, at once; past it, connections go to Accept
// unexamined.
const maxResumePeeks = 1024

// tcpResumeHandshakeTimeout bounds a resume handshake over TCP when the
// Config sets no HandshakeTimeout.
const tcpResumeHandshakeTimeout = 10 * time.Second

// tcpResumeShare is how much of a resume's time a dialer keeps for TCP,
// after its RDMA attempts: half. An RDMA path that is dead but routed
// (RoCE dropped, IP alive) answers nothing, so only the race's time ends
// it; and when all its connections resume at once a host is slow, and a
// TCP handshake that loses a SYN needs a second.
func tcpResumeShare(budget time.Duration) time.Duration { return budget / 2 }

// tcpUserTimeout is TCP_USER_TIMEOUT for a resumed path: how long its
// bytes may go unacknowledged before the path counts as failed, as the
// keepalive bounds an RDMA path.
func tcpUserTimeout(set settings) time.Duration {
	return max(3*resumeKeepAlive(set.keepAlive, set.resumeTimeout), 5*time.Second)
}

// addrOf is the IP address of an rnet address, or the zero Addr.
func addrOf(a net.Addr) netip.Addr {
	if a, ok := a.(*Addr); ok {
		return a.Addr().Unmap()
	}
	return netip.Addr{}
}

// newTCPPath builds the queue pair and fresh engine of a resumed path over
// c, configured by cfg, with the exchange own begun.
func newTCPPath(c *net.TCPConn, cfg ring.Config, own [ring.ExchangeSize]byte, set settings, local, remote net.Addr) (*tcpqp.QP, *ring.Engine, error) {
	layout := cfg.Normalize().Layout()
	q := tcpqp.New(c, tcpqp.Options{LocalAddr: local, RemoteAddr: remote,
		SendDepth: layout.SendDepth, RecvDepth: layout.RecvDepth, UserTimeout: tcpUserTimeout(set)})
	eng, err := tcpqp.NewEngine(cfg, q)
	if err == nil {
		// The exchange goes first on the new path: before Establish,
		// which lets the engine send.
		err = eng.BeginResume(own)
	}
	if err != nil {
		q.Destroy()
		return nil, nil, err
	}
	return q, eng, nil
}

// closeOnDone makes c's blocked reads and writes return once ctx is done;
// a handshake that succeeds stops it before the path starts (tcpqp's Start
// clears the deadlines), and fails if stop reports it had already begun.
func closeOnDone(ctx context.Context, c net.Conn) (stop func() bool) {
	return context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
}

// tcpAttemptFailed is the resume's error once the RDMA attempts failed
// with rdmaErr and the one over TCP to dialled with err.
func tcpAttemptFailed(ctx context.Context, rdmaErr error, dialled netip.AddrPort, err error) error {
	err = fmt.Errorf("over TCP: %w", err)
	var re *resumeError
	if errors.As(rdmaErr, &re) {
		re.attempts = append(re.attempts, resumeAttemptError{addr: dialled, err: err})
		if ctx.Err() != nil {
			re.cause = context.Cause(ctx)
		}
		return re
	}
	return fmt.Errorf("%w; %v: %w", rdmaErr, dialled, err)
}

// connectTCP resumes over TCP to the port dialled, from the connection's
// first local address (the listener looks for resumes only from its
// connections' addresses).
func (r *dialResumer) connectTCP(ctx context.Context, req stream.ResumeRequest, gen uint64) (resumedPath, error) {
	var d net.Dialer
	if r.local.IsValid() && r.local.Is4() == r.dialled.Addr().Unmap().Is4() {
		d.LocalAddr = &net.TCPAddr{IP: r.local.AsSlice()}
	}
	nc, err := d.DialContext(ctx, "tcp", r.dialled.String())
	if err != nil {
		switch {
		case errors.Is(err, syscall.EADDRNOTAVAIL):
			err = fmt.Errorf("the connection's address %v is gone from this host, and the listener takes resumes over TCP only from its connections' addresses: %w", r.local, err)
		case ctx.Err() != nil:
			err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		return resumedPath{}, err
	}
	c := nc.(*net.TCPConn)
	stopClose := closeOnDone(ctx, c)
	defer stopClose()
	q, eng, err := newTCPPath(c, req.Ring, req.Own, r.set, netAddr(netip.AddrPortFrom(r.local, 0)), netAddr(r.dialled))
	if err != nil {
		c.Close()
		return resumedPath{}, err
	}
	abort := func(err error) (resumedPath, error) {
		q.Destroy()
		if ctx.Err() != nil {
			// The socket's error is only how the end showed: not a
			// deadline of the caller's.
			err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		return resumedPath{}, err
	}
	own := eng.LocalConnData()
	pd, err := resume.EncodeRequest(own[:], resume.Request{Kind: resume.Resume, Token: r.latest().token})
	if err == nil {
		pd, err = resume.EncodeTCPRequest(pd)
	}
	if err != nil {
		return abort(err)
	}
	if _, err := c.Write(pd); err != nil {
		return abort(err)
	}
	status, reply, err := resume.ReadTCPReply(c)
	if err != nil {
		return abort(fmt.Errorf("reading the listener's answer: %w", err))
	}
	if status != resume.TCPAccepted {
		err := fmt.Errorf("the listener refused the resume with reason %d", status)
		if rejectCode(status) == rejectResumeRefused {
			err = fmt.Errorf("%w: %w", errResumeForgotten, err)
		}
		return abort(err)
	}
	rep, ok, err := resume.ParseReply(reply)
	if err != nil {
		return abort(err)
	}
	if !ok {
		return abort(errors.New("the listener there does not know the connection: its reply does not resume it"))
	}
	r.replied(gen, rep, r.dialled)
	if err := eng.Establish(reply); err != nil {
		return abort(err)
	}
	if _, err := c.Write([]byte{resume.TCPReady}); err != nil {
		return abort(err)
	}
	if !stopClose() {
		return abort(context.Cause(ctx)) // it may have set a deadline
	}
	return resumedPath{qp: q, eng: eng, reply: &rep}, nil
}

// handshakeTimeout bounds a resume handshake over TCP.
func (r *resumeListener) handshakeTimeout() time.Duration {
	if r.set.handshakeTimeout > 0 {
		return r.set.handshakeTimeout
	}
	return tcpResumeHandshakeTimeout
}

// takeResumesOverTCP tells the RDMA side's replies that the TCP side takes
// resumes: from the RDMA side's first reply, which may come before the TCP
// side listens (a dialer tries TCP only as a last resort).
func (dl *DualListener) takeResumesOverTCP() {
	if r := dl.resumes(); r != nil {
		r.tcp.Store(true)
	}
}

// resumes is the RDMA side's resume state, nil without Config.Resume.
func (dl *DualListener) resumes() *resumeListener {
	if dl.rdma == nil {
		return nil
	}
	return dl.rdma.l.resume
}

// screenTCP takes c, a connection the TCP side accepted, if it may be a
// resume: one from the address of a connection the listener could resume,
// while fewer than maxResumePeeks connections, and fewer than that
// address's connections and a few more, are being looked at. It looks at
// c's first bytes on a goroutine of its own, for resumePeekTimeout or, while
// a connection from that address waits for its dialer, the handshake's
// bound, and either resumes or hands c to Accept.
func (dl *DualListener) screenTCP(c *net.TCPConn) bool {
	r := dl.resumes()
	if r == nil {
		return false
	}
	ra, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	from := ra.AddrPort().Addr()
	if dl.peeking.Add(1) > maxResumePeeks {
		dl.peeking.Add(-1)
		return false
	}
	ok, patient := r.beginPeek(from)
	if !ok {
		dl.peeking.Add(-1)
		return false
	}
	bound := resumePeekTimeout
	if patient {
		bound = r.handshakeTimeout()
	}
	dl.wg.Add(1)
	go func() {
		defer dl.wg.Done()
		resuming := peekResume(c, dl.done, bound)
		if resuming {
			dl.takeTCPResume(r, c)
		}
		r.endPeek(from)
		dl.peeking.Add(-1)
		if !resuming {
			// Not a resume: an ordinary TCP client, handed out as any.
			dialCounts[FallbackPeerTCP].Add(1)
			dl.hand(newTCPConn(c, FallbackPeerTCP, nil))
		}
	}()
	return true
}

// peekResume reports whether c's first bytes, within timeout (or until
// done is closed), open a resume request; it leaves them to be read, and
// gives up as soon as they differ from resume.TCPMagic.
func peekResume(c *net.TCPConn, done <-chan struct{}, timeout time.Duration) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-done: // the listener closes
			c.SetReadDeadline(time.Unix(1, 0))
		case <-stop:
		}
	}()
	var prefix [len(resume.TCPMagic)]byte
	n := 0
	rc.Read(func(fd uintptr) bool {
		m, _, err := unix.Recvfrom(int(fd), prefix[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err == unix.EAGAIN {
			return false
		}
		n = max(m, 0)
		// Part of the magic so far: wait for more (the netpoller wakes
		// this only when more comes).
		return err != nil || n == 0 || n == len(prefix) || !bytes.Equal(prefix[:n], resume.TCPMagic[:n])
	})
	return n == len(prefix) && resume.IsTCPRequest(prefix[:])
}

// takeTCPResume runs the listener's side of a resume over TCP on c, whose
// first bytes open a resume request: as handshakeResume does over the
// connection manager, it takes the token, waits for the connection's
// Resume call, builds the new path from it, replies and, once the dialer's
// RTU has come, commits the resume and hands the path over.
func (dl *DualListener) takeTCPResume(r *resumeListener, c *net.TCPConn) {
	l := dl.rdma.l
	remote := c.RemoteAddr()
	ctx, cancel := context.WithTimeout(context.Background(), r.handshakeTimeout())
	defer cancel()
	go func() { // Close ends the handshake
		select {
		case <-dl.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	stopClose := closeOnDone(ctx, c)
	defer stopClose()
	refuse := func(status byte, err error) {
		if b, eerr := resume.EncodeTCPReply(status, nil); eerr == nil {
			c.Write(b)
		}
		c.Close()
		l.handshakeFailed(remote, "TCP", err, true)
	}
	pd, err := resume.ReadTCPRequest(c)
	if err != nil {
		c.Close()
		l.handshakeFailed(remote, "TCP", fmt.Errorf("reading a resume request over TCP: %w", err), false)
		return
	}
	req, err := resume.ParseRequest(pd)
	if err == nil && req.Kind != resume.Resume {
		err = &resume.ProtocolError{Check: resume.ErrMalformed, Detail: "a request over TCP that does not resume a connection"}
	}
	if err != nil {
		refuse(byte(rejectBadRequest), err)
		return
	}
	if _, err := ring.DecodeConnData(pd); err != nil {
		refuse(byte(rejectBadRequest), err)
		return
	}
	attempt, err := r.table.Begin(req.Token)
	if err != nil {
		refuse(byte(rejectResumeRefused), fmt.Errorf("%w: %w", errResumeRefused, err))
		return
	}
	committed := false
	defer func() {
		if !committed {
			r.table.Abort(attempt)
		}
	}()
	w, err := attempt.Value.await(ctx, fmt.Errorf("rnet: the dialer resumed the connection over TCP from %v", remote))
	if err != nil {
		refuse(byte(rejectResources), err)
		return
	}
	local := netAddr(c.LocalAddr().(*net.TCPAddr).AddrPort())
	q, eng, err := newTCPPath(c, w.req.Ring, w.req.Own, r.set, local, netAddr(c.RemoteAddr().(*net.TCPAddr).AddrPort()))
	if err != nil {
		refuse(byte(rejectResources), err)
		return
	}
	path := resumedPath{qp: q, eng: eng}
	fail := func(err error) {
		path.close()
		l.handshakeFailed(remote, "TCP", err, false)
	}
	if err := eng.Establish(pd); err != nil {
		fail(err)
		return
	}
	ours := eng.LocalConnData()
	reply, err := resume.EncodeReply(ours[:], resume.Reply{
		Version:  resume.Version,
		Lifetime: r.table.Lifetime(),
		Token:    attempt.Token,
		Addrs:    replyAddrs(r.devices, addrOf(local), ""),
		TCP:      true,
	})
	if err == nil {
		reply, err = resume.EncodeTCPReply(resume.TCPAccepted, reply)
	}
	if err != nil {
		fail(err)
		return
	}
	if _, err := c.Write(reply); err != nil {
		fail(err)
		return
	}
	var rtu [1]byte
	if _, err := c.Read(rtu[:]); err != nil {
		fail(fmt.Errorf("no RTU from the dialer over TCP: %w", err))
		return
	}
	if rtu[0] != resume.TCPReady {
		fail(fmt.Errorf("the dialer's RTU over TCP is %#x, not %#x", rtu[0], resume.TCPReady))
		return
	}
	if !stopClose() {
		fail(context.Cause(ctx)) // it may have set a deadline
		return
	}
	newPath, err := r.table.Commit(attempt)
	if err != nil {
		fail(err)
		return
	}
	committed = true
	if !attempt.Value.hand(w, path, newPath) {
		fail(errResumeEnded)
	}
}
