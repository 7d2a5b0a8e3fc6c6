//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// TestRXEDualListener: a dual listener on an RDMA address takes an RDMA
// dial over RDMA and a plain TCP dial over TCP, on one port; nothing leaks.
func TestRXEDualListener(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	ln, err := (&ListenConfig{}).ListenDual(ctx, "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	if ln.RDMAError() != nil {
		t.Fatalf("the dual listener has no RDMA side: %v", ln.RDMAError())
	}
	d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, TCPFallback: true}

	acc := acceptOne(ln)
	c, err := d.DialConn(ctx, "rdma", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-acc
	if Transport(c) != "rdma" || s == nil || Transport(s) != "rdma" {
		t.Fatalf("an RDMA dial to a dual listener: %T, accepted %T; want RDMA on both ends", c, s)
	}
	echoOnce(t, c, s)
	c.Close()
	s.Close()

	acc = acceptOne(ln)
	tc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s = <-acc
	if sc, ok := s.(*TCPConn); !ok || sc.Reason != FallbackPeerTCP {
		t.Fatalf("a TCP dial to a dual listener was accepted as %T %+v, want a *TCPConn (%v)", s, s, FallbackPeerTCP)
	}
	echoOnce(t, tc, s)
	tc.Close()
	s.Close()
	if rdma, tcp := ln.Accepted(); rdma != 1 || tcp != 1 {
		t.Errorf("the listener accepted %d over RDMA and %d over TCP, want 1 and 1", rdma, tcp)
	}
	ln.Close()
	checkReleased(t, gor0, fds0, res0)
}

// TestRXEFallbackToTCPServer: a falling-back dial to a server that listens
// over TCP alone is refused over RDMA and connects over TCP, saying so;
// the next dial goes to TCP at once and says why, until the memory of the
// refusal ends; with fallback off the dial fails as it always did.
func TestRXEFallbackToTCPServer(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	ln, err := net.Listen("tcp", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	local := &Addr{netip.AddrPortFrom(pair.Client, 0)}
	dial := func(d *Dialer) (*TCPConn, error) {
		t.Helper()
		acc := acceptOne(ln)
		start := time.Now()
		c, err := d.DialConn(ctx, "rdma", addr)
		if err != nil {
			return nil, err
		}
		took := time.Since(start)
		s := <-acc
		defer s.Close()
		defer c.Close()
		echoOnce(t, c, s)
		tc, ok := c.(*TCPConn)
		if !ok {
			t.Fatalf("DialConn to a TCP server returned a %T", c)
		}
		t.Logf("DialConn: %v after %v", tc.Reason, took.Round(time.Microsecond))
		return tc, nil
	}

	if _, err := (&Dialer{LocalAddr: local}).DialConn(ctx, "rdma", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("without TCPFallback: %v, want a refused RDMA dial", err)
	}
	refusedRecently.forget("rdma", addr)
	d := &Dialer{LocalAddr: local, TCPFallback: true}
	tc, err := dial(d)
	if err != nil {
		t.Fatal(err)
	}
	if tc.Reason != FallbackRefused || !errors.Is(tc.Cause, syscall.ECONNREFUSED) {
		t.Errorf("first dial: reason %v, cause %v; want %v and the refusal", tc.Reason, tc.Cause, FallbackRefused)
	}
	t.Logf("first dial fell back: %v (%v)", tc.Reason, tc.Cause)
	if tc, err = dial(d); err != nil {
		t.Fatal(err)
	}
	if tc.Reason != FallbackRemembered || tc.Cause == nil || !strings.HasPrefix(tc.Cause.Error(), "RDMA not tried: refused ") ||
		!errors.Is(tc.Cause, syscall.ECONNREFUSED) {
		t.Errorf("second dial: reason %v, cause %v; want %v and the remembered refusal", tc.Reason, tc.Cause, FallbackRemembered)
	}
	t.Logf("second dial: %v (%v)", tc.Reason, tc.Cause)

	// A memory that has ended: RDMA is tried again.
	refusedRecently.forget("rdma", addr)
	brief := &Dialer{LocalAddr: local, TCPFallback: true, TCPFallbackMemory: time.Nanosecond}
	for i := range 2 {
		if tc, err = dial(brief); err != nil {
			t.Fatal(err)
		}
		if tc.Reason != FallbackRefused {
			t.Errorf("dial %d with a memory of 1 ns: reason %v, want %v", i+1, tc.Reason, FallbackRefused)
		}
	}
	refusedRecently.forget("rdma", addr)
}

// TestIWARPDualListener: on an address an iWARP device serves, the device
// takes the TCP port for its own connections: ListenDual says so, and
// leaves nothing listening.
func TestIWARPDualListener(t *testing.T) {
	pair := rdmatest.RequireIWARP(t)
	ln, err := (&ListenConfig{}).ListenDual(context.Background(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err == nil {
		// The device left the port to TCP after all: then both must work.
		defer ln.Close()
		acc := acceptOne(ln)
		tc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		s := <-acc
		if s == nil {
			t.Fatal("no connection accepted")
		}
		defer s.Close()
		echoOnce(t, tc, s)
		t.Logf("iWARP and TCP listen on one port: %v", ln.Addr())
		return
	}
	if !errors.Is(err, errIWARPPortTaken) {
		t.Errorf("ListenDual on an iWARP address = %v, want the iWARP port explained", err)
	}
	t.Logf("ListenDual on an iWARP address: %v", err)
}

// TestRXEFallbackOnTimeout: an RDMA listener that never answers (a
// connection-manager id listening, its requests never read) holds a dial
// until RDMAAttemptTimeout, and the dial then connects over TCP to the
// same port, saying it timed out.
func TestRXEFallbackOnTimeout(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	tl, err := net.Listen("tcp", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	port := tl.Addr().(*net.TCPAddr).Port
	_, _, release := rawListener(t, netip.AddrPortFrom(pair.Server, uint16(port)))
	defer release()
	addr := tl.Addr().String()
	defer refusedRecently.forget("rdma", addr)
	d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, TCPFallback: true, RDMAAttemptTimeout: 200 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	acc := acceptOne(tl)
	c, err := d.DialConn(ctx, "rdma", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-acc
	if s == nil {
		t.Fatal("the TCP listener accepted nothing")
	}
	defer s.Close()
	tc, ok := c.(*TCPConn)
	if !ok || tc.Reason != FallbackTimeout {
		t.Fatalf("DialConn = %T %+v, want a *TCPConn (%v)", c, c, FallbackTimeout)
	}
	echoOnce(t, c, s)
	t.Logf("fell back: %v (%v)", tc.Reason, tc.Cause)
	if why := refusedRecently.lookup("rdma", addr, time.Now()); why != nil {
		t.Errorf("a timed-out attempt was remembered: %v", why)
	}
}

// TestRXEListenerSetDeadline: as *net.TCPListener's: a passed deadline
// fails a blocked Accept with a timeout, a cleared one lets the next
// connection through, and after Close it cannot be set.
func TestRXEListenerSetDeadline(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	blocked := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		blocked <- err
	}()
	if err := ln.SetDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if err := <-blocked; !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a blocked Accept past its deadline = %v, want a timeout", err)
	}
	if err := ln.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	dialed, accepted := openPairs(t, pair, ln, 1)
	roundTripOnce(t, dialed[0], accepted[0])
	closeAll(dialed, accepted)
	ln.Close()
	if err := ln.SetDeadline(time.Now()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("SetDeadline after Close = %v, want net.ErrClosed", err)
	}
}

// TestRXEDialerDeadline: a Dialer's Deadline that has passed fails the dial
// with a timeout, and leaves nothing behind.
func TestRXEDialerDeadline(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, Deadline: time.Now().Add(-time.Second)}
	var ne net.Error
	if _, err := d.Dial("rdma", ln.Addr().String()); !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("Dial with a passed Deadline = %v, want a timeout", err)
	}
}
