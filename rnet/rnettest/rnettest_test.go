package rnettest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/nettest"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnettest"
)

// pair returns a connected client and accepted server end on f.
func pair(t *testing.T, f *rnettest.Fabric) (client, server *rnet.Conn) {
	t.Helper()
	ln, err := f.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = f.Dial("rdma", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.AcceptRDMA()
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	return client, server
}

// closeBoth closes both ends side by side: each Close waits for the
// other end's goodbye.
func closeBoth(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Go(func() { a.Close() })
	b.Close()
	wg.Wait()
}

func TestNettest(t *testing.T) {
	f := rnettest.NewFabric(nil)
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		c, s := pair(t, f)
		return c, s, func() { closeBoth(c, s) }, nil
	})
}

// Small rings make every few writes wrap, stall on credits or split.
func TestNettestSmallRings(t *testing.T) {
	f := rnettest.NewFabric(&rnet.Config{SendBufferSize: 4096, RecvBufferSize: 4096, SendQueueSize: 16, RecvQueueSize: 16})
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		c, s := pair(t, f)
		return c, s, func() { closeBoth(c, s) }, nil
	})
}

func TestDialRefused(t *testing.T) {
	f := rnettest.NewFabric(nil)
	_, err := f.Dial("rdma", "127.0.0.1:7471")
	var op *net.OpError
	var reject *rnet.RejectError
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &op) || op.Op != "dial" ||
		!errors.As(err, &reject) || !reject.NoListener() {
		t.Fatalf("Dial with no listener = %v, want a dial *net.OpError around a no-listener *rnet.RejectError", err)
	}
	if op.Addr == nil || op.Addr.String() != "127.0.0.1:7471" {
		t.Errorf("error's address = %v, want 127.0.0.1:7471", op.Addr)
	}
}

func TestDialCancelled(t *testing.T) {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.DialContext(ctx, "rdma", ln.Addr().String()); !errors.Is(err, context.Canceled) {
		t.Fatalf("DialContext with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestBadAddresses(t *testing.T) {
	f := rnettest.NewFabric(nil)
	for _, tc := range []struct{ network, address string }{
		{"tcp", "127.0.0.1:1"},
		{"rdma", "no-port"},
		{"rdma", "example.com:1"},
		{"rdma", "127.0.0.1:70000"},
		{"rdma6", "127.0.0.1:1"},
		{"rdma", "127.0.0.1:0"},
	} {
		if c, err := f.Dial(tc.network, tc.address); err == nil {
			c.Close()
			t.Errorf("Dial(%q, %q) succeeded, want an error", tc.network, tc.address)
		}
	}
}

func TestListenerClose(t *testing.T) {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", "127.0.0.1:7471")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Listen("rdma", "127.0.0.1:7471"); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second Listen on the address = %v, want EADDRINUSE", err)
	}
	// Established but never accepted: Close must close it, and its dialer
	// then sees the end of the stream.
	c, err := f.Dial("rdma", "127.0.0.1:7471")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	accepted := make(chan error, 1)
	ln2, err := f.Listen("rdma", "127.0.0.1:7472")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, err := ln2.Accept(); accepted <- err }()
	ln2.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept blocked across Close = %v, want net.ErrClosed", err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("Read from a connection its listener closed unaccepted = %v, want io.EOF", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
	}
	if _, err := f.Dial("rdma", "127.0.0.1:7471"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial after the listener closed = %v, want ECONNREFUSED", err)
	}
	ln3, err := f.Listen("rdma", "127.0.0.1:7471")
	if err != nil {
		t.Fatalf("Listen on an address its closed listener freed: %v", err)
	}
	ln3.Close()
}

func TestAcceptDeadline(t *testing.T) {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ln.SetDeadline(time.Now().Add(-time.Second))
	if _, err := ln.Accept(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Accept past its deadline = %v, want os.ErrDeadlineExceeded", err)
	}
}

func TestWildcardListener(t *testing.T) {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", ":7471")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, addr := range []string{"127.0.0.1:7471", "10.1.2.3:7471", "[::1]:7471", "localhost:7471"} {
		c, err := f.Dial("rdma", addr)
		if err != nil {
			t.Fatalf("Dial %s to a wildcard listener: %v", addr, err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if c.RemoteAddr().String() != s.LocalAddr().String() || c.LocalAddr().String() != s.RemoteAddr().String() {
			t.Errorf("dial %s: client %v -> %v, server %v <- %v", addr, c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
		}
		closeBoth(c, s)
	}
}

// Each Fabric is its own address space: parallel tests listening on the
// same address each reach their own listener.
func TestFabricsIsolated(t *testing.T) {
	for i := range 4 {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			f := rnettest.NewFabric(nil)
			ln, err := f.Listen("rdma", "127.0.0.1:7471")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			want := []byte{byte(i)}
			go func() {
				s, err := ln.Accept()
				if err != nil {
					return
				}
				defer s.Close()
				s.Write(want)
			}()
			c, err := f.Dial("rdma", "127.0.0.1:7471")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read %v, %v from this fabric's listener, want %v", got, err, want)
			}
		})
	}
}

func TestHalfClose(t *testing.T) {
	c, s := pair(t, rnettest.NewFabric(nil))
	defer closeBoth(c, s)
	if _, err := c.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	req, err := io.ReadAll(s)
	if err != nil || string(req) != "request" {
		t.Fatalf("server read %q, %v; want the request then EOF", req, err)
	}
	if _, err := s.Write([]byte("reply")); err != nil {
		t.Fatalf("write after the peer's CloseWrite: %v", err)
	}
	s.CloseWrite()
	reply, err := io.ReadAll(c)
	if err != nil || string(reply) != "reply" {
		t.Fatalf("client read %q, %v; want the reply then EOF", reply, err)
	}
}

// Every goroutine a Listener and its connections start ends with their
// Close.
func TestReleased(t *testing.T) {
	f := rnettest.NewFabric(nil)
	// Settle: one round first, so that lazily started runtime goroutines
	// are in the baseline, and wait for its goroutines to end.
	c, s := pair(t, f)
	closeBoth(c, s)
	before := procstat.GoroutineIDs()
	ln, err := f.Listen("rdma", ":0")
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		c, err := f.Dial("rdma", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		closeBoth(c, s)
	}
	// One left unaccepted: the listener's Close must release it.
	unaccepted, err := f.Dial("rdma", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	unaccepted.Close()
	if left := procstat.WaitNoNewGoroutines(before); len(left) > 0 {
		t.Fatalf("%d goroutines left after Close:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

func TestDefaultFabric(t *testing.T) {
	ln, err := rnettest.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := rnettest.Dial("rdma", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	closeBoth(c, s)
}

// A Listener holds Backlog connections for Accept and refuses more, as a
// device listener's full backlog does; Close closes the ones it holds.
func TestBacklogFull(t *testing.T) {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var clients []*rnet.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range rnettest.Backlog {
		c, err := f.Dial("rdma", ln.Addr().String())
		if err != nil {
			t.Fatalf("dial %d of a backlog of %d: %v", len(clients)+1, rnettest.Backlog, err)
		}
		clients = append(clients, c)
	}
	_, err = f.Dial("rdma", ln.Addr().String())
	var reject *rnet.RejectError
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &reject) || !reject.ByApplication() {
		t.Fatalf("Dial past a full backlog = %v, want a refusal by the listener", err)
	}
	ln.Close()
	if _, err := clients[0].Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("Read from a queued connection its listener closed = %v, want io.EOF", err)
	}
}

// TestDialConn: DialConn takes net.Dialer's networks, returns a working
// net.Conn, and on failure a nil interface, not a nil *rnet.Conn in one.
func TestDialConn(t *testing.T) {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, network := range []string{"tcp", "tcp4", "rdma"} {
		c, err := f.DialConn(context.Background(), network, ln.Addr().String())
		if err != nil {
			t.Fatalf("DialConn(%q): %v", network, err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.(*rnet.Conn); !ok {
			t.Errorf("DialConn(%q) returned a %T, want *rnet.Conn", network, c)
		}
		c.Close()
		s.Close()
	}
	c, err := f.DialConn(context.Background(), "tcp", "127.0.0.1:1")
	if err == nil || c != nil {
		t.Fatalf("DialConn to nothing = %#v, %v; want a nil net.Conn and an error", c, err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("DialConn to nothing: %v; want ECONNREFUSED", err)
	}
	if _, err := f.DialConn(context.Background(), "udp", ln.Addr().String()); err == nil {
		t.Error("DialConn(\"udp\") succeeded")
	}
}
