package rnet

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/benchkit"
)

// Host benchmarks: rnet over the simulated fabric (package rnet's unexported
// simPipe, hence here and not in benchmarks/) against TCP over loopback, in
// the same run. The device versions live in benchmarks/. There are no cgo
// crossings over the simulated fabric, so no cgo/op here.
//
//	go test -run '^$' -bench 'BenchmarkSim' ./rnet

func BenchmarkSimThroughput(b *testing.B) {
	for _, size := range benchkit.Sizes {
		b.Run(benchkit.SizeName(size), func(b *testing.B) {
			b.Run("rnet", func(b *testing.B) {
				c, s := simPipe(b, nil)
				defer c.Close()
				defer s.Close()
				benchkit.Throughput(b, c, s, size, nil)
			})
			b.Run("tcp", func(b *testing.B) {
				c, s := benchkit.TCPPair(b, "127.0.0.1", "")
				benchkit.Throughput(b, c, s, size, nil)
			})
		})
	}
}

func BenchmarkSimPingPong(b *testing.B) {
	for _, size := range benchkit.LatencySizes {
		b.Run(benchkit.SizeName(size), func(b *testing.B) {
			b.Run("rnet", func(b *testing.B) {
				c, s := simPipe(b, nil)
				defer c.Close()
				defer s.Close()
				benchkit.PingPong(b, c, s, size, nil)
			})
			b.Run("tcp", func(b *testing.B) {
				c, s := benchkit.TCPPair(b, "127.0.0.1", "")
				benchkit.PingPong(b, c, s, size, nil)
			})
		})
	}
}
