//go:build linux && cgo

package compat

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/rnet"
)

// overTCP reports whether RNET_COMPAT_TCP=1 asks for the baseline: the same
// tests over TCP loopback, to tell a fault in rnet from one in a test.
func overTCP() bool { return os.Getenv("RNET_COMPAT_TCP") == "1" }

// requirePair returns the lab's device pair (or skips), or loopback over TCP.
func requirePair(t *testing.T) rdmatest.Pair {
	t.Helper()
	if overTCP() {
		lo := netip.MustParseAddr("127.0.0.1")
		return rdmatest.Pair{Server: lo, Client: lo}
	}
	return rdmatest.Require(t)
}

// listen opens an rnet listener on the lab's server address, closed at the end of the test.
func listen(t *testing.T, pair rdmatest.Pair) net.Listener {
	t.Helper()
	var ln net.Listener
	var err error
	if overTCP() {
		ln, err = net.Listen("tcp", net.JoinHostPort(pair.Server.String(), "0"))
	} else {
		lc := rnet.ListenConfig{HandshakeError: func(remote net.Addr, err error) {
			t.Logf("listener refused or dropped a connection from %v: %v", remote, err)
		}}
		ln, err = lc.Listen(context.Background(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &loggingListener{Listener: ln, t: t}
}

// loggingListener logs the first error other than io.EOF that each
// accepted connection's Read or Write returns: servers such as http.Server
// close a failed connection silently, and the client then sees only the
// abrupt end, not its cause.
type loggingListener struct {
	net.Listener
	t *testing.T
}

func (l *loggingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &loggingConn{Conn: c, t: l.t}, nil
}

type loggingConn struct {
	net.Conn
	t    *testing.T
	once sync.Once
}

func (c *loggingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.log("Read", err)
	return n, err
}

func (c *loggingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.log("Write", err)
	return n, err
}

// CloseWrite keeps what http.Server does before closing a connection whose
// request body it did not read.
func (c *loggingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

func (c *loggingConn) log(op string, err error) {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) {
		return
	}
	c.once.Do(func() {
		if s, ok := c.Conn.(interface{ Stats() rnet.Stats }); ok {
			c.t.Logf("server side of %v: %s: %v; stats %+v", c.RemoteAddr(), op, err, s.Stats())
		} else {
			c.t.Logf("server side of %v: %s: %v", c.RemoteAddr(), op, err)
		}
	})
}

// dialer dials from the lab's client address, so traffic crosses from rxe0 to rxe1.
func dialer(pair rdmatest.Pair) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if overTCP() {
		return func(ctx context.Context, _, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}
	}
	d := &rnet.Dialer{LocalAddr: &rnet.Addr{AddrPort: netip.AddrPortFrom(pair.Client, 0)}, Timeout: 30 * time.Second}
	return func(ctx context.Context, _, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, "rdma", addr)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

// connPair returns a connected client/server pair of rnet conns.
func connPair(t *testing.T, pair rdmatest.Pair) (client, server net.Conn) {
	t.Helper()
	ln := listen(t, pair)
	acc := make(chan net.Conn, 1)
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		acc <- c
	}()
	c, err := dialer(pair)(context.Background(), "rdma", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-acc:
		return c, s
	case err := <-errc:
		c.Close()
		t.Fatal(err)
	}
	panic("unreachable")
}

// random is the pool that payloads are cut from, filled once.
var random = sync.OnceValue(func() []byte {
	b := make([]byte, 17<<20)
	rand.NewChaCha8([32]byte{'r', 'n', 'e', 't'}).Read(b)
	return b
})

// payload returns n deterministic pseudo-random bytes (n <= 16 MiB) for seed:
// different seeds give different bytes. The caller must not modify them.
func payload(seed uint64, n int) []byte {
	off := int(seed * 4099 % (1 << 20))
	return random()[off : off+n : off+n]
}

func sum(b []byte) [32]byte { return sha256.Sum256(b) }
