package benchmarks

import (
	"net"
	"sync"
	"testing"

	"github.com/rnet-dev/rnet/internal/benchkit"
	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnettest"
)

// Host benchmarks: rnet over the simulated fabric (package rnettest) against
// TCP over loopback, in the same run. There are no cgo crossings over the
// simulated fabric, so no cgo/op here; built with -tags rnet_lockcount they
// report locks/op.
//
//	go -C benchmarks test -run '^$' -bench 'BenchmarkSim' .

// simCounters are what an rnet host benchmark reports beside time: locks,
// when they are counted.
func simCounters() benchkit.Counters { return benchkit.Counters{Locks: lockCounter()} }

// simPair returns a connected pair over a fresh simulated fabric whose
// connections use cfg (nil: the defaults).
func simPair(b *testing.B, cfg *rnet.Config) (client, server net.Conn) {
	b.Helper()
	f := rnettest.NewFabric(cfg)
	ln, err := f.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := f.Dial("rdma", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { // side by side: each Close waits for the other's goodbye
		var wg sync.WaitGroup
		wg.Go(func() { c.Close() })
		s.Close()
		wg.Wait()
	})
	return c, s
}

func BenchmarkSimThroughput(b *testing.B) {
	for _, size := range benchkit.Sizes {
		b.Run(benchkit.SizeName(size), func(b *testing.B) {
			b.Run("rnet", func(b *testing.B) {
				c, s := simPair(b, nil)
				benchkit.Throughput(b, c, s, size, simCounters())
			})
			b.Run("tcp", func(b *testing.B) {
				c, s := benchkit.TCPPair(b, "127.0.0.1", "")
				benchkit.Throughput(b, c, s, size, benchkit.Counters{})
			})
		})
	}
}

func BenchmarkSimPingPong(b *testing.B) {
	for _, size := range benchkit.LatencySizes {
		b.Run(benchkit.SizeName(size), func(b *testing.B) {
			b.Run("rnet", func(b *testing.B) {
				c, s := simPair(b, nil)
				benchkit.PingPong(b, c, s, size, simCounters())
			})
			// Both ends polling, as BenchmarkPingPongPoll on a device.
			b.Run("rnet-poll", func(b *testing.B) {
				c, s := simPair(b, &rnet.Config{BusyPoll: pollForever})
				benchkit.PingPong(b, c, s, size, simCounters())
			})
			b.Run("tcp", func(b *testing.B) {
				c, s := benchkit.TCPPair(b, "127.0.0.1", "")
				benchkit.PingPong(b, c, s, size, benchkit.Counters{})
			})
		})
	}
}
