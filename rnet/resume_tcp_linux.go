//go:build linux && cgo

package rnet

import (
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
// bytes: the dialer writes its request as soon as it has connected.
const resumePeekTimeout = time.Second

// maxResumePeeks bounds the connections the TCP side looks at, and the
// resume handshakes it runs, at once; past it, connections go to Accept
// unexamined.
const maxResumePeeks = 1024

// tcpResumeHandshakeTimeout bounds a resume handshake over TCP when the
// Config sets no HandshakeTimeout.
const tcpResumeHandshakeTimeout = 10 * time.Second

// tcpResumeShare is how much of a resume's time a dialer keeps for TCP,
// after its RDMA attempts: a third, at least a second (all of it if the
// resume's time is shorter than two).
func tcpResumeShare(budget time.Duration) time.Duration {
	return min(max(budget/3, time.Second), budget/2)
}

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

// resumeOverTCP resumes over TCP to the port dialled, from the connection's
// first local address (the listener looks for resumes only from its
// connections' addresses), after the RDMA attempts failed with rdmaErr.
func (r *dialResumer) resumeOverTCP(ctx context.Context, req stream.ResumeRequest, rdmaErr error) (resumedPath, error) {
	p, err := r.connectTCP(ctx, req)
	if err == nil {
		return p, nil
	}
	err = fmt.Errorf("over TCP: %w", err)
	var re *resumeError
	if errors.As(rdmaErr, &re) {
		re.attempts = append(re.attempts, resumeAttemptError{r.dialled, err})
		if ctx.Err() != nil {
			re.cause = context.Cause(ctx)
		}
		return resumedPath{}, re
	}
	return resumedPath{}, fmt.Errorf("%w; %v: %w", rdmaErr, r.dialled, err)
}

func (r *dialResumer) connectTCP(ctx context.Context, req stream.ResumeRequest) (resumedPath, error) {
	var d net.Dialer
	if r.local.IsValid() && r.local.Is4() == r.dialled.Addr().Unmap().Is4() {
		d.LocalAddr = &net.TCPAddr{IP: r.local.AsSlice()}
	}
	nc, err := d.DialContext(ctx, "tcp", r.dialled.String())
	if err != nil {
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			err = fmt.Errorf("the connection's address %v is gone from this host, and the listener takes resumes over TCP only from its connections' addresses: %w", r.local, err)
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
			err = fmt.Errorf("%w (%w)", context.Cause(ctx), err)
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
	r.replied(rep)
	if err := eng.Establish(reply); err != nil {
		return abort(err)
	}
	if _, err := c.Write([]byte{resume.TCPReady}); err != nil {
		return abort(err)
	}
	if !stopClose() {
		return abort(context.Cause(ctx)) // it may have set a deadline
	}
	return resumedPath{qp: q, eng: eng}, nil
}

// takeResumesOverTCP tells the RDMA side's replies that the TCP side takes
// resumes, once both sides listen.
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
// when fewer than maxResumePeeks are being looked at. It looks at its first
// bytes on a goroutine of its own and either resumes or hands c to Accept.
func (dl *DualListener) screenTCP(c *net.TCPConn) bool {
	r := dl.resumes()
	if r == nil {
		return false
	}
	ra, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok || !r.hasPeer(ra.AddrPort().Addr()) {
		return false
	}
	if dl.peeking.Add(1) > maxResumePeeks {
		dl.peeking.Add(-1)
		return false
	}
	dl.wg.Add(1)
	go func() {
		defer dl.wg.Done()
		defer dl.peeking.Add(-1)
		if !peekResume(c) {
			dialCounts[FallbackPeerTCP].Add(1)
			dl.hand(newTCPConn(c, FallbackPeerTCP, nil))
			return
		}
		dl.takeTCPResume(r, c)
	}()
	return true
}

// peekResume reports whether c's first bytes, within resumePeekTimeout,
// open a resume request; it leaves them to be read.
func peekResume(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var prefix [len(resume.TCPMagic)]byte
	n := 0
	c.SetReadDeadline(time.Now().Add(resumePeekTimeout))
	defer c.SetReadDeadline(time.Time{})
	// Readable only once the whole prefix has come (or the peer's FIN),
	// so the wait costs no spin over a partial prefix.
	rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, len(prefix)) })
	defer rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) })
	rc.Read(func(fd uintptr) bool {
		m, _, err := unix.Recvfrom(int(fd), prefix[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err == unix.EAGAIN || err == nil && m > 0 && m < len(prefix) {
			return false // wait for the rest
		}
		n = max(m, 0)
		return true
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
	timeout := r.set.handshakeTimeout
	if timeout <= 0 {
		timeout = tcpResumeHandshakeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
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
