//go:build linux && cgo

package rnet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
)

// exchangePattern writes n bytes of a pattern each way on a and b at once
// and checks every byte that arrives.
func exchangePattern(t *testing.T, a, b *Conn, n int) {
	t.Helper()
	errc := make(chan error, 4)
	for i, pair := range [][2]*Conn{{a, b}, {b, a}} {
		want := make([]byte, n)
		for j := range want {
			want[j] = patternByte(i, j)
		}
		go func() {
			_, err := pair[0].Write(want)
			errc <- err
		}()
		go func() {
			got := make([]byte, n)
			_, err := io.ReadFull(pair[1], got)
			if err == nil && !bytes.Equal(got, want) {
				err = errors.New("bytes differ")
			}
			errc <- err
		}()
	}
	for range 4 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// dialResume dials ln's port at to from from with cfg, and returns both
// ends.
func dialResume(t *testing.T, ln *Listener, from, to netip.Addr, cfg *Config) (client, server *Conn) {
	t.Helper()
	accepted := make(chan *Conn, 1)
	go func() {
		c, _ := ln.AcceptRDMA() // ends with the listener
		accepted <- c
	}()
	d := &Dialer{Config: cfg, LocalAddr: &Addr{netip.AddrPortFrom(from, 0)}, Timeout: time.Minute}
	c, err := d.Dial("rdma", netip.AddrPortFrom(to, ln.Addr().(*Addr).Port()).String())
	if err != nil {
		ln.Close()
		<-accepted
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("dial connected but Accept failed")
	}
	return c, s
}

// TestRXEResumeNegotiated: on rxe, where connections share their poll
// group's receive queue by default, a dialer and a wildcard listener with
// Config.Resume agree; both ends keep receive queues of their own, since
// a retaining engine cannot count a window that grows, and a stream runs
// both ways past the send ring. The reply names the guest's other device's
// address, never the one dialled. A resume request with a token the
// listener never issued is refused with reason 6, and the connection goes
// on; a dialer that never confirms its handshake leaves no token
// behind, nor does the connection once closed. An offering dialer to a
// listener without Resume, on the shared receive queue, gets an ordinary
// connection that runs.
func TestRXEResumeNegotiated(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := &Config{Resume: true, HandshakeTimeout: 2 * time.Second}
	ln, err := (&ListenConfig{Config: cfg}).Listen(ctx, "rdma4", ":0")
	if err != nil {
		t.Fatal(err)
	}
	table := ln.l.resume.table
	c, s := dialResume(t, ln, pair.Client, pair.Server, cfg)
	agreed := c.resume
	if agreed == nil || !c.Config().Resume || !s.Config().Resume {
		t.Fatalf("no agreement: dialer %v, Config().Resume %v and %v", agreed, c.Config().Resume, s.Config().Resume)
	}
	t.Logf("the reply names %v (dialled %v)", agreed.addrs, pair.Server)
	port := ln.Addr().(*Addr).Port()
	if !slices.Contains(agreed.addrs, netip.AddrPortFrom(pair.Client, port)) ||
		slices.Contains(agreed.addrs, netip.AddrPortFrom(pair.Server, port)) {
		t.Errorf("the reply names %v: want the other device's %v, not the dialled %v", agreed.addrs, pair.Client, pair.Server)
	}
	for name, conn := range map[string]*Conn{"dialer": c, "listener": s} {
		if !conn.conn.EngineConfig().RetainUntilReceived {
			t.Errorf("%s: the engine does not retain", name)
		}
		if sharesReceiveQueue(t, conn) {
			t.Errorf("%s: a retaining engine's queue pair is on the shared receive queue", name)
		}
	}
	exchangePattern(t, c, s, 1<<20) // eight send rings' worth each way

	// Resume requests with tokens the listener never issued.
	sane := encode(ring.ConnData{
		Version: 1, Flags: ring.FlagIOMap, Credits: 16,
		TargetSGL: ring.RemoteSGE{Addr: 0x10000, Key: 7, Length: 2},
		DataBuf:   ring.RemoteSGE{Addr: 0x20000, Key: 7, Length: 1 << 16},
	})
	target := netip.AddrPortFrom(pair.Server, port)
	for name, tok := range map[string]resume.Token{"zero": {}, "wrong": {1}} {
		private, err := resume.EncodeRequest(sane, resume.Request{Kind: resume.Resume, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		id, release := rawRequest(ctx, t, pair.Client, target, private, 0x1234)
		_, err = id.Await(ctx, cm.EventEstablished)
		release()
		var re *cm.RejectError
		if !errors.As(err, &re) {
			t.Fatalf("%s token: the listener answered %v, want a reject", name, err)
		}
		if r, ok := decodeRejectReason(re.PrivateData); !ok || r.code != rejectResumeRefused {
			t.Errorf("%s token: reject % x decodes to %+v, %v; want reason %d", name, re.PrivateData, r, ok, rejectResumeRefused)
		}
	}
	if n := ln.Metrics().Counters.Refused["resume_refused"]; n != 2 {
		t.Errorf("the listener counts %d resume_refused, want 2", n)
	}

	// An offer whose dialer never confirms (an id without a queue pair
	// sends no RTU): its token goes when the listener gives up.
	offer, err := resume.EncodeRequest(sane, resume.Request{Kind: resume.Offer, Version: resume.Version})
	if err != nil {
		t.Fatal(err)
	}
	id, release := rawRequest(ctx, t, pair.Client, target, offer, 0x1234)
	ev, err := id.Await(ctx, cm.EventConnectResponse)
	if err != nil {
		release()
		t.Fatalf("the listener did not accept the stalled offer: %v", err)
	}
	if _, ok, err := resume.ParseReply(ev.Param.PrivateData); !ok || err != nil {
		t.Errorf("the stalled offer's reply: agreed %v, %v; want a token", ok, err)
	}
	conntest.Until(t, "the stalled handshake's token to go", func() bool { return table.Len() == 1 })
	release()

	exchangePattern(t, c, s, 64<<10) // the connection is unaffected
	c.Close()
	s.Close()
	conntest.Until(t, "the closed connection's token to go", func() bool { return table.Len() == 0 })
	ln.Close()

	// An offering dialer and a listener without Resume, which shares its
	// poll group's receive queue and so advertises a window that grows.
	plain, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	c, s = dialResume(t, plain, pair.Client, pair.Server, cfg)
	if c.resume != nil || c.Config().Resume || c.conn.EngineConfig().RetainUntilReceived {
		t.Errorf("declined: agreement %v, Resume %v, dialer retains %v; want none", c.resume, c.Config().Resume,
			c.conn.EngineConfig().RetainUntilReceived)
	}
	if !sharesReceiveQueue(t, s) {
		t.Error("the listener without Resume does not share its receive queue")
	}
	exchangePattern(t, c, s, 1<<20)
	c.Close()
	s.Close()
	plain.Close()
	checkReleased(t, gor0, fds0, res0)
}

// TestIWARPResumeNegotiated: on siw a dialer and a listener with
// Config.Resume agree and a stream runs both ways past the send ring; an
// offering dialer to a listener without Resume gets an ordinary connection.
func TestIWARPResumeNegotiated(t *testing.T) {
	pair := rdmatest.RequireIWARP(t)
	cfg := &Config{Resume: true}
	ln, err := (&ListenConfig{Config: cfg}).Listen(context.Background(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	c, s := dialResume(t, ln, pair.Client, pair.Server, cfg)
	if c.resume == nil || !c.conn.EngineConfig().RetainUntilReceived || !s.conn.EngineConfig().RetainUntilReceived {
		t.Fatalf("no agreement on iWARP: %v", c.resume)
	}
	exchangePattern(t, c, s, 1<<20)
	c.Close()
	s.Close()
	conntest.Until(t, "the closed connection's token to go", func() bool { return ln.l.resume.table.Len() == 0 })
	ln.Close()

	plain, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	c, s = dialResume(t, plain, pair.Client, pair.Server, cfg)
	defer c.Close()
	defer s.Close()
	if c.resume != nil || c.conn.EngineConfig().RetainUntilReceived {
		t.Errorf("declined: agreement %v, dialer retains %v", c.resume, c.conn.EngineConfig().RetainUntilReceived)
	}
	exchangePattern(t, c, s, 1<<20)
}
