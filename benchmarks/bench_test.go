package benchmarks

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/rnet-dev/rnet/internal/benchkit"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/rnet"
)

// tcpAddrs are the TCP baseline's addresses: the same interfaces as the
// RDMA pair when there is one (the lab's veth), loopback otherwise.
func tcpAddrs() (server, client string) {
	s, c := rdmaEnv()
	if s.IsValid() {
		return s.String(), c.String()
	}
	return "127.0.0.1", ""
}

func rdmaEnv() (server, client netip.Addr) {
	return envAddr("RNET_TEST_SERVER"), envAddr("RNET_TEST_CLIENT")
}

// transport is one side of a comparison: how to make a connected pair, a
// listener and a dialer, and which crossing counter to report.
type transport struct {
	name   string
	pair   func(b *testing.B) (client, server net.Conn)
	listen func(b *testing.B) (net.Listener, benchkit.DialFunc)
	cgo    benchkit.Counter
}

func transports() []transport {
	return []transport{
		{name: "rdma", pair: rdmaPair, listen: rdmaListen, cgo: verbs.CgoCalls},
		{name: "tcp", pair: tcpPair, listen: tcpListen},
	}
}

func tcpPair(b *testing.B) (net.Conn, net.Conn) {
	s, c := tcpAddrs()
	return benchkit.TCPPair(b, s, c)
}

func tcpListen(b *testing.B) (net.Listener, benchkit.DialFunc) {
	s, c := tcpAddrs()
	ln, err := net.Listen("tcp", net.JoinHostPort(s, "0"))
	if err != nil {
		b.Fatal(err)
	}
	d := net.Dialer{}
	if c != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(c)}
	}
	return ln, func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}

func rdmaListen(b *testing.B) (net.Listener, benchkit.DialFunc) {
	p := rdmatest.Require(b)
	ln, err := rnet.Listen("rdma", net.JoinHostPort(p.Server.String(), "0"))
	if err != nil {
		b.Fatal(err)
	}
	d := rnet.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(p.Client, 0))}
	return ln, func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "rdma", addr) }
}

func rdmaPair(b *testing.B) (net.Conn, net.Conn) {
	ln, dial := rdmaListen(b)
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			acc <- nil
			return
		}
		acc <- c
	}()
	c, err := dial(context.Background(), ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s := <-acc
	if s == nil {
		c.Close()
		b.Fatal("accept failed")
	}
	b.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

func BenchmarkThroughput(b *testing.B) {
	for _, size := range benchkit.Sizes {
		b.Run(benchkit.SizeName(size), func(b *testing.B) {
			for _, t := range transports() {
				b.Run(t.name, func(b *testing.B) {
					c, s := t.pair(b)
					benchkit.Throughput(b, c, s, size, t.cgo)
				})
			}
		})
	}
}

func BenchmarkPingPong(b *testing.B) {
	for _, size := range benchkit.LatencySizes {
		b.Run(benchkit.SizeName(size), func(b *testing.B) {
			for _, t := range transports() {
				b.Run(t.name, func(b *testing.B) {
					c, s := t.pair(b)
					benchkit.PingPong(b, c, s, size, t.cgo)
				})
			}
		})
	}
}

func BenchmarkGRPCUnary(b *testing.B) {
	for _, t := range transports() {
		b.Run(t.name, func(b *testing.B) {
			ln, dial := t.listen(b)
			benchkit.GRPCUnary(b, ln, dial, 64, t.cgo)
		})
	}
}

func BenchmarkGRPCStream(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		b.Run(benchkit.SizeName(size), func(b *testing.B) {
			for _, t := range transports() {
				b.Run(t.name, func(b *testing.B) {
					ln, dial := t.listen(b)
					benchkit.GRPCStream(b, ln, dial, size, t.cgo)
				})
			}
		})
	}
}

func BenchmarkHTTP(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		b.Run(benchkit.SizeName(size), func(b *testing.B) {
			for _, t := range transports() {
				b.Run(t.name, func(b *testing.B) {
					ln, dial := t.listen(b)
					benchkit.HTTP(b, ln, dial, size, t.cgo)
				})
			}
		})
	}
}
