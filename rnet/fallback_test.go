package rnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/verbs"
	"golang.org/x/net/nettest"
)

// withoutRDMA skips a test of what happens on a machine without RDMA when
// this one has it (the device tests cover that case).
func withoutRDMA(t *testing.T) {
	t.Helper()
	if _, err := verbs.Devices(); err == nil {
		t.Skip("this machine has RDMA devices")
	}
}

// TestDualListenerFallbackWithoutRDMA: on a machine without RDMA a dual
// listener listens over TCP alone and says why; a falling-back dial to it
// connects over TCP with the reason "no RDMA device", and the listener's
// end says its peer came over TCP.
func TestDualListenerFallbackWithoutRDMA(t *testing.T) {
	withoutRDMA(t)
	ctx := context.Background()
	ln, err := (&ListenConfig{}).ListenDual(ctx, "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if !errors.Is(ln.RDMAError(), ErrNoDevice) && !errors.Is(ln.RDMAError(), ErrNotSupported) {
		t.Errorf("RDMAError = %v, want ErrNoDevice or ErrNotSupported", ln.RDMAError())
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	d := &Dialer{TCPFallback: true}
	before := DialFallbackStats()
	c, err := d.DialConn(ctx, "rdma", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.FailNow()
	}
	defer s.Close()
	after := DialFallbackStats()
	if after.TCP[FallbackNoDevice]-before.TCP[FallbackNoDevice] != 1 || after.RDMA != before.RDMA {
		t.Errorf("DialFallbackStats went from %+v to %+v, want one more TCP connection for %v", before, after, FallbackNoDevice)
	}
	if rdma, tcp := ln.Accepted(); rdma != 0 || tcp != 1 {
		t.Errorf("the listener accepted %d over RDMA and %d over TCP, want 0 and 1", rdma, tcp)
	}
	tc, ok := c.(*TCPConn)
	if !ok || tc.Reason != FallbackNoDevice || Transport(c) != "tcp" {
		t.Fatalf("DialConn = %T %+v, want a *TCPConn with reason %v", c, c, FallbackNoDevice)
	}
	if !errors.Is(tc.Cause, ErrNoDevice) && !errors.Is(tc.Cause, ErrNotSupported) {
		t.Errorf("Cause = %v, want the RDMA attempt's ErrNoDevice", tc.Cause)
	}
	if sc, ok := s.(*TCPConn); !ok || sc.Reason != FallbackPeerTCP {
		t.Errorf("accepted %T %+v, want a *TCPConn with reason %v", s, s, FallbackPeerTCP)
	}
	echoOnce(t, c, s)
	t.Logf("fell back: %v (%v)", tc.Reason, tc.Cause)

	// Without TCPFallback nothing changes: the dial fails as Dial does.
	if c, err := (&Dialer{}).DialConn(ctx, "rdma", ln.Addr().String()); err == nil || c != nil {
		t.Errorf("DialConn without TCPFallback = %v, %v; want the RDMA error", c, err)
	}
	// The package's DialConn is the zero Dialer's: the same error, and a
	// nil net.Conn rather than a nil *Conn inside one.
	if c, err := DialConn(ctx, "tcp", ln.Addr().String()); err == nil || c != nil {
		t.Errorf("rnet.DialConn = %v, %v; want the RDMA error and a nil net.Conn", c, err)
	} else if !errors.Is(err, ErrNoDevice) && !errors.Is(err, ErrNotSupported) {
		t.Errorf("rnet.DialConn: %v, want ErrNoDevice", err)
	}
}

func echoOnce(t *testing.T, a, b net.Conn) {
	t.Helper()
	msg := []byte("hello over whatever works")
	go a.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(b, got); err != nil || string(got) != string(msg) {
		t.Fatalf("read %q, %v; want %q", got, err, msg)
	}
}

// TestFallbackNettest: a falling-back connection keeps net.Conn's
// contract (nettest.TestConn), both ends.
func TestFallbackNettest(t *testing.T) {
	withoutRDMA(t)
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		ln, err := (&ListenConfig{}).ListenDual(context.Background(), "rdma", "127.0.0.1:0")
		if err != nil {
			return nil, nil, nil, err
		}
		type res struct {
			c   net.Conn
			err error
		}
		acc := make(chan res, 1)
		go func() {
			c, err := ln.Accept()
			acc <- res{c, err}
		}()
		c1, err = (&Dialer{TCPFallback: true}).DialConn(context.Background(), "rdma", ln.Addr().String())
		if err != nil {
			ln.Close()
			return nil, nil, nil, err
		}
		r := <-acc
		if r.err != nil {
			c1.Close()
			ln.Close()
			return nil, nil, nil, r.err
		}
		return c1, r.c, func() { c1.Close(); r.c.Close(); ln.Close() }, nil
	})
}

// TestDualListenerClose: Close ends a blocked Accept with net.ErrClosed.
func TestDualListenerClose(t *testing.T) {
	withoutRDMA(t)
	ln, err := (&ListenConfig{}).ListenDual(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		done <- err
	}()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close = %v, want net.ErrClosed", err)
	}
}

// TestFallbackReasons: which RDMA failures fall back, and as what.
func TestFallbackReasons(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	op := func(err error) error { return &net.OpError{Op: "dial", Net: "rdma", Err: err} }
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want FallbackReason
		ok   bool
	}{
		{context.Background(), op(ErrNoDevice), FallbackNoDevice, true},
		{context.Background(), op(ErrNotSupported), FallbackNoDevice, true},
		{context.Background(), op(&cm.RejectError{Status: 8}), FallbackRefused, true},
		{context.Background(), op(context.DeadlineExceeded), FallbackTimeout, true},
		{context.Background(), op(&verbs.Error{Op: "rdma_resolve_addr", Errno: syscall.EADDRNOTAVAIL}), FallbackNoRoute, true},
		{context.Background(), op(&verbs.Error{Op: "rdma_resolve_route", Errno: syscall.ENETUNREACH}), FallbackNoRoute, true},
		{context.Background(), op(ErrLockedMemory), FallbackRDMAError, true},
		{ended, op(context.Canceled), 0, false},
		{context.Background(), op(&ConfigError{Field: "SendBufferSize"}), 0, false},
		{context.Background(), op(&net.DNSError{Err: "no such host", Name: "x"}), 0, false},
	} {
		got, ok := fallbackReasonOf(tc.ctx, tc.err)
		if got != tc.want || ok != tc.ok {
			t.Errorf("fallbackReasonOf(%v) = %v, %v; want %v, %v", tc.err, got, ok, tc.want, tc.ok)
		}
	}
	if s := fmt.Sprint(FallbackRefused, FallbackReason(99)); s != "RDMA refused FallbackReason(99)" {
		t.Errorf("reasons print as %q", s)
	}
}

// TestRefusalMemory: a refusal is remembered until its time, then
// forgotten; a success forgets it at once; the memory stays bounded.
func TestRefusalMemory(t *testing.T) {
	m := refusalMemory{refusals: make(map[string]refusal)}
	now := time.Now()
	cause := &net.OpError{Op: "dial", Net: "rdma", Err: &cm.RejectError{Addr: "10.0.0.1:1", Status: cm.RejectInvalidServiceID}}
	r := refusal{at: now, until: now.Add(time.Minute), reason: FallbackRefused, err: cause}
	m.remember("rdma", "10.0.0.1:1", r)
	if m.lookup("rdma", "10.0.0.1:1", now) == nil || m.lookup("rdma4", "10.0.0.1:1", now) != nil || m.lookup("rdma", "10.0.0.1:2", now) != nil {
		t.Error("a refusal is not remembered for its address and network alone")
	}
	if why := m.lookup("rdma", "10.0.0.1:1", now.Add(12*time.Second)); why == nil || why.age != 12*time.Second || why.err != error(cause) {
		t.Errorf("lookup 12 s later = %+v, want the refusal, 12 s old", why)
	}
	if m.lookup("rdma", "10.0.0.1:1", now.Add(time.Minute)) != nil {
		t.Error("a refusal is remembered past its time")
	}
	m.remember("rdma", "10.0.0.1:1", r)
	m.forget("rdma", "10.0.0.1:1")
	if m.lookup("rdma", "10.0.0.1:1", now) != nil {
		t.Error("a forgotten refusal is remembered")
	}
	for i := range maxRefusals + 10 {
		m.remember("rdma", fmt.Sprintf("10.0.0.1:%d", i), r)
	}
	if len(m.refusals) > maxRefusals {
		t.Errorf("the memory holds %d refusals, more than %d", len(m.refusals), maxRefusals)
	}
}

// TestDualListenerSetDeadline: a deadline that has passed fails Accept with
// a timeout; clearing it lets Accept take the next connection.
func TestDualListenerSetDeadline(t *testing.T) {
	withoutRDMA(t)
	ln, err := (&ListenConfig{}).ListenDual(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := ln.SetDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := ln.Accept(); !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Accept after its deadline = %v, want a timeout", err)
	}
	if err := ln.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	accepted := acceptOne(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := <-accepted; s == nil {
		t.Fatal("Accept failed after the deadline was cleared")
	} else {
		s.Close()
	}
	ln.Close()
	if err := ln.SetDeadline(time.Now()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("SetDeadline after Close = %v, want net.ErrClosed", err)
	}
}

// acceptOne accepts one connection from ln in the background (nil if
// Accept failed).
func acceptOne(ln net.Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			c = nil
		}
		ch <- c
	}()
	return ch
}

// TestDialerDeadlinePassed: a Dialer whose Deadline has passed fails at
// once with a timeout, over RDMA or falling back.
func TestDialerDeadlinePassed(t *testing.T) {
	past := time.Now().Add(-time.Second)
	for _, d := range []*Dialer{{Deadline: past}, {Deadline: past, TCPFallback: true}} {
		_, err := d.DialConn(context.Background(), "rdma", "127.0.0.1:7471")
		var ne net.Error
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("DialConn (TCPFallback %v) with a past Deadline = %v, want a timeout", d.TCPFallback, err)
		}
	}
}
