package rnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// fakeRDMA makes DialConn's RDMA attempts fail with fail's error for the
// test, counting them.
func fakeRDMA(t *testing.T, fail func(ctx context.Context, address string) error) *atomic.Int32 {
	t.Helper()
	var attempts atomic.Int32
	hook := func(ctx context.Context, network, address string) (*Conn, error) {
		attempts.Add(1)
		return nil, fail(ctx, address)
	}
	testHookDialRDMA.Store(&hook)
	t.Cleanup(func() { testHookDialRDMA.Store(nil) })
	return &attempts
}

// rejectedBy is the error of a dial to address that the connection manager
// reported REJECTED with status and private data, as dial returns it.
func rejectedBy(ctx context.Context, address string, status int, private []byte) error {
	raddr := netip.MustParseAddrPort(address)
	return dialError(ctx, nil, netAddr(raddr), explainReject(&cm.RejectError{Addr: address, Status: status, PrivateData: private}))
}

// rnetReject is an rnet listener's reject private data for code, padded as
// RoCE pads it.
func rnetReject(code rejectCode) []byte {
	return append(rejectReason{code}.encode(), make([]byte, 148-rejectReasonSize)...)
}

// tcpServer listens over TCP on loopback and accepts (and closes) every
// connection until the test ends.
func tcpServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// refusingTCPAddr is a loopback address where nothing listens over TCP.
func refusingTCPAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestBusyRejectIsNotRemembered: a reject in which an rnet listener said
// it was busy (or short of memory), and a timeout, fall back for that dial
// alone: the next dial tries RDMA again; so does a reject without an rnet
// reason (a C listener's, or a closing listener's), and no device here.
// Only what says that no RDMA is there (the connection manager's reject
// when nothing listens, or no route) is remembered, and a reject whose
// private data is not ours is handled as such.
func TestBusyRejectIsNotRemembered(t *testing.T) {
	addr := tcpServer(t)
	for _, tc := range []struct {
		name     string
		fail     func(ctx context.Context, address string) error
		reason   FallbackReason
		remember bool
	}{
		{"BacklogFull", func(ctx context.Context, a string) error {
			return rejectedBy(ctx, a, cm.RejectConsumer, rnetReject(rejectBusy))
		}, FallbackRefused, false},
		{"HandshakesBusy", func(ctx context.Context, a string) error {
			return rejectedBy(ctx, a, cm.RejectConsumer, rnetReject(rejectPendingFull))
		}, FallbackRefused, false},
		{"IWARPBusy", func(ctx context.Context, a string) error {
			return rejectedBy(ctx, a, -int(syscall.ECONNREFUSED), rejectReason{rejectPendingFull}.encode())
		}, FallbackRefused, false},
		{"LockedMemory", func(ctx context.Context, a string) error {
			return rejectedBy(ctx, a, cm.RejectConsumer, rnetReject(rejectLockedMemory))
		}, FallbackRefused, false},
		{"UnknownRnetCode", func(ctx context.Context, a string) error {
			return rejectedBy(ctx, a, cm.RejectConsumer, rnetReject(200))
		}, FallbackRefused, false},
		{"TimedOut", func(ctx context.Context, a string) error {
			return dialError(ctx, nil, nil, &timeoutError{context.DeadlineExceeded})
		}, FallbackTimeout, false},
		{"NothingListens", func(ctx context.Context, a string) error {
			return rejectedBy(ctx, a, cm.RejectInvalidServiceID, make([]byte, 148))
		}, FallbackRefused, true},
		{"IWARPNothingListens", func(ctx context.Context, a string) error { return rejectedBy(ctx, a, -int(syscall.ECONNREFUSED), nil) }, FallbackRefused, true},
		{"CListener", func(ctx context.Context, a string) error {
			return rejectedBy(ctx, a, cm.RejectConsumer, make([]byte, 148))
		}, FallbackRefused, false},
		{"ForeignPrivateData", func(ctx context.Context, a string) error {
			return rejectedBy(ctx, a, cm.RejectConsumer, []byte("rnet\x00\x01\xff\xff not ours \x1b[31m"))
		}, FallbackRefused, false},
		{"NoDevice", func(ctx context.Context, a string) error {
			return dialError(ctx, nil, nil, ErrNoDevice)
		}, FallbackNoDevice, false},
		{"NoRoute", func(ctx context.Context, a string) error {
			return dialError(ctx, nil, nil, &verbs.Error{Op: "rdma_resolve_route", Addr: a, Errno: syscall.ENETUNREACH})
		}, FallbackNoRoute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refusedRecently.forget("rdma", addr)
			defer refusedRecently.forget("rdma", addr)
			attempts := fakeRDMA(t, tc.fail)
			d := &Dialer{TCPFallback: true}
			c, err := d.DialConn(t.Context(), "rdma", addr)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			tc1, ok := c.(*TCPConn)
			if !ok || tc1.Reason != tc.reason || tc1.Cause == nil {
				t.Fatalf("first dial: %T %+v, want a *TCPConn (%v) with its cause", c, c, tc.reason)
			}
			if strings.ContainsAny(tc1.Cause.Error(), "\x1b\xff") {
				t.Errorf("the cause %q holds the peer's bytes", tc1.Cause)
			}
			if remembered := refusedRecently.lookup("rdma", addr, time.Now()) != nil; remembered != tc.remember {
				t.Errorf("remembered = %v after %v, want %v", remembered, tc1.Cause, tc.remember)
			}
			c, err = d.DialConn(t.Context(), "rdma", addr)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			tc2 := c.(*TCPConn)
			switch {
			case tc.remember && (attempts.Load() != 1 || tc2.Reason != FallbackRemembered):
				t.Errorf("second dial: %d RDMA attempts in all, reason %v; want 1 and %v", attempts.Load(), tc2.Reason, FallbackRemembered)
			case !tc.remember && (attempts.Load() != 2 || tc2.Reason != tc.reason):
				t.Errorf("second dial: %d RDMA attempts in all, reason %v; want RDMA tried again (2) and %v", attempts.Load(), tc2.Reason, tc.reason)
			}
			t.Logf("%v (%v); then %v", tc1.Reason, tc1.Cause, tc2.Reason)
		})
	}
}

// TestRememberedDialNamesItsCause: a dial that goes to TCP because of a
// remembered refusal carries that refusal as its Cause, and when the TCP
// dial fails too its error says that RDMA was not tried, when it was
// refused and why; errors.Is and errors.As reach both errors.
func TestRememberedDialNamesItsCause(t *testing.T) {
	refused := refusingTCPAddr(t)
	serving := tcpServer(t)
	fakeRDMA(t, func(ctx context.Context, a string) error {
		return rejectedBy(ctx, a, cm.RejectInvalidServiceID, make([]byte, 148))
	})
	d := &Dialer{TCPFallback: true}
	refusedAt := make(map[string]time.Time)
	for _, addr := range []string{refused, serving} {
		refusedRecently.forget("rdma", addr)
		defer refusedRecently.forget("rdma", addr)
		// The first dial is refused over RDMA; the memory of it is moved
		// 12 s into the past.
		if c, err := d.DialConn(t.Context(), "rdma", addr); err == nil {
			c.Close()
		}
		refusedRecently.mu.Lock()
		r, ok := refusedRecently.refusals[refusalKey("rdma", addr)]
		refusedAt[addr] = r.at
		r.at = r.at.Add(-12 * time.Second)
		refusedRecently.refusals[refusalKey("rdma", addr)] = r
		refusedRecently.mu.Unlock()
		if !ok {
			t.Fatalf("a refusal because nothing listens at %s was not remembered", addr)
		}
	}
	_, err := d.DialConn(t.Context(), "rdma", refused)
	since := time.Since(refusedAt[refused])
	if err == nil {
		t.Fatal("a dial to a refusing TCP port connected")
	}
	t.Logf("%v", err)
	text := err.Error()
	prefix := "dial tcp " + refused + ": connect: connection refused (RDMA not tried: refused "
	if !strings.HasPrefix(text, prefix) {
		t.Fatalf("error %q, want it to begin %q", text, prefix)
	}
	age, rest, _ := strings.Cut(strings.TrimPrefix(text, prefix), " s ago: ")
	if n, err := strconv.Atoi(age); err != nil || n < 12 || time.Duration(n)*time.Second > 12*time.Second+since {
		t.Errorf("error %q: the refusal is said to be %q s old, want 12 s and the %v since it was remembered", text, age, since)
	}
	if want := "rdma_connect " + refused + ": connection refused: nothing listens there"; !strings.Contains(rest, want) || !strings.HasSuffix(rest, ")") {
		t.Errorf("error %q does not end with the remembered cause %q", text, want)
	}
	var oe *net.OpError
	var re *RejectError
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &oe) || oe.Net != "tcp" || !errors.As(err, &re) || !re.NoListener() {
		t.Errorf("%v: want it to match ECONNREFUSED, be the TCP dial's *net.OpError, and hold the remembered *RejectError", err)
	}

	c, err := d.DialConn(t.Context(), "rdma", serving)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	tc, ok := c.(*TCPConn)
	if !ok || tc.Reason != FallbackRemembered || tc.Cause == nil {
		t.Fatalf("DialConn = %T %+v, want a *TCPConn (%v) with the remembered cause", c, c, FallbackRemembered)
	}
	if !strings.HasPrefix(tc.Cause.Error(), "RDMA not tried: refused 1") || !errors.Is(tc.Cause, syscall.ECONNREFUSED) || !errors.As(tc.Cause, &re) {
		t.Errorf("Cause = %v, want the remembered refusal, matching ECONNREFUSED and holding its *RejectError", tc.Cause)
	}

	// A remembered dial out of time is a timeout, as net's dials are.
	late := &Dialer{TCPFallback: true, Deadline: time.Now().Add(-time.Second)}
	var ne net.Error
	if _, err := late.DialConn(t.Context(), "rdma", serving); !errors.As(err, &ne) || !ne.Timeout() ||
		!strings.Contains(err.Error(), "(RDMA not tried: refused ") {
		t.Errorf("a remembered dial past its deadline = %v, want a timeout that names the remembered refusal", err)
	}
}
