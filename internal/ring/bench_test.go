package ring_test

import (
	"flag"
	"fmt"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
)

// Flags for comparing BenchmarkStream runs (docs/performance.md, "Keeping
// sent bytes until the peer has them").
var (
	benchRetain  = flag.Bool("ring.retain", false, "BenchmarkStream: both ends keep sent bytes until the peer has them (RetainUntilReceived)")
	benchSendBuf = flag.Int("ring.sendbuf", 0, "BenchmarkStream: SendBufferSize of both ends (0: the default)")
)

// BenchmarkStream measures bytes per second through two engines on the
// simulated fabric (Auto mode, one goroutine): each op writes one buffer
// of the given size on one side and runs both driver loops and the reader
// until it has gone through. It measures the engines' and the simulator's
// CPU cost, not any network. It must not allocate in steady state.
func BenchmarkStream(b *testing.B) {
	for _, size := range []int{64, 4 << 10, 64 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			f := simfabric.New(1, simfabric.Options{Auto: true})
			cfg := ring.Config{SendBufferSize: *benchSendBuf, RetainUntilReceived: *benchRetain}
			sa, sb := connect(b, f, cfg, cfg)
			src := make([]byte, size)
			dst := make([]byte, 256<<10)
			op := func() {
				p := src
				for len(p) > 0 {
					n, err := sa.eng.Write(p)
					if err != nil {
						b.Fatal(err)
					}
					p = p[n:]
					for moved := true; moved; {
						m1, err1 := sa.service(len(sa.wcs))
						m2, err2 := sb.service(len(sb.wcs))
						if err1 != nil || err2 != nil {
							b.Fatal(err1, err2)
						}
						got, _ := sb.eng.Read(dst)
						moved = m1 || m2 || got > 0
					}
				}
			}
			for i := 0; i < 1000; i++ { // warm up the simulator's queues
				op()
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				op()
			}
			b.StopTimer()
			if st := f.Stats(); st.RNR != 0 || st.Errors != 0 {
				b.Fatalf("%+v", st)
			}
		})
	}
}
