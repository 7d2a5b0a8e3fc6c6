package benchmarks

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/benchkit"
	"github.com/rnet-dev/rnet/internal/lockcount"
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
// listener and a dialer, and which counters to report.
type transport struct {
	name   string
	pair   func(b *testing.B) (client, server net.Conn)
	listen func(b *testing.B) (net.Listener, benchkit.DialFunc)
	counts benchkit.Counters
}

func transports() []transport {
	return []transport{
		{name: "rdma", pair: rdmaDefaultPair, listen: rdmaDefaultListen, counts: rdmaCounters()},
		{name: "tcp", pair: tcpPair, listen: tcpListen}, // no rnet locks, no crossings
	}
}

// rdmaCounters are the counts an rdma benchmark reports: crossings into C,
// and locks taken when built with the rnet_lockcount tag.
func rdmaCounters() benchkit.Counters {
	return benchkit.Counters{Cgo: verbs.CgoCalls, Locks: lockCounter()}
}

// lockCounter is lockcount.Taken when the build counts locks (the
// rnet_lockcount tag), nil otherwise: locks/op is reported only when it
// means something.
func lockCounter() benchkit.Counter {
	if !lockcount.Enabled {
		return nil
	}
	return lockcount.Taken
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

func rdmaDefaultListen(b *testing.B) (net.Listener, benchkit.DialFunc) { return rdmaListen(b, nil) }
func rdmaDefaultPair(b *testing.B) (net.Conn, net.Conn)                { return rdmaPair(b, nil) }

// rdmaListen listens on the device pair's server address; both the
// listener's connections and the dialer's use cfg (nil: the defaults).
func rdmaListen(b *testing.B, cfg *rnet.Config) (net.Listener, benchkit.DialFunc) {
	p := rdmatest.Require(b)
	lc := rnet.ListenConfig{Config: cfg}
	ln, err := lc.Listen(context.Background(), "rdma", net.JoinHostPort(p.Server.String(), "0"))
	if err != nil {
		b.Fatal(err)
	}
	d := rnet.Dialer{Config: cfg, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(p.Client, 0))}
	return ln, func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "rdma", addr) }
}

func rdmaPair(b *testing.B, cfg *rnet.Config) (net.Conn, net.Conn) {
	ln, dial := rdmaListen(b, cfg)
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
					benchkit.Throughput(b, c, s, size, t.counts)
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
					benchkit.PingPong(b, c, s, size, t.counts)
				})
			}
		})
	}
}

// pollForever is a BusyPoll longer than any wait in a benchmark: a blocked
// Read or Write spins until its data comes and never parks, as rstream's
// loop does (make bench's rnet-poll).
const pollForever = time.Minute

// BenchmarkPingPongPoll is make bench's rnet-poll round trip in one
// process: 64 B each way with both ends polling. Beside ns/op it reports
// cgo/op, the crossings into C per round trip of both ends, and, built with
// -tags rnet_lockcount, locks/op, the mutexes both ends took per round trip.
func BenchmarkPingPongPoll(b *testing.B) {
	c, s := rdmaPair(b, &rnet.Config{BusyPoll: pollForever})
	benchkit.PingPong(b, c, s, 64, rdmaCounters())
}

func BenchmarkGRPCUnary(b *testing.B) {
	for _, t := range transports() {
		b.Run(t.name, func(b *testing.B) {
			ln, dial := t.listen(b)
			benchkit.GRPCUnary(b, ln, dial, 64, t.counts)
		})
	}
}

func BenchmarkGRPCStream(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		b.Run(benchkit.SizeName(size), func(b *testing.B) {
			for _, t := range transports() {
				b.Run(t.name, func(b *testing.B) {
					ln, dial := t.listen(b)
					benchkit.GRPCStream(b, ln, dial, size, t.counts)
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
					benchkit.HTTP(b, ln, dial, size, t.counts)
				})
			}
		})
	}
}
