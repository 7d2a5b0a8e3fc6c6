package rnet

import (
	"expvar"
	"fmt"
	"net/netip"
	"testing"
)

// BenchmarkSocketsExpvar is one read of the "rnet_sockets" variable, as a
// scrape of /debug/vars makes it, with 2000 and then 10 000 simulated
// connections open (see docs/performance.md).
func BenchmarkSocketsExpvar(b *testing.B) {
	v := expvar.Get(socketsExpvarName)
	server := netip.MustParseAddrPort("10.0.9.2:7481")
	open := 0
	for _, conns := range []int{2000, 10000} {
		for ; open < conns; open += 2 {
			client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 9, byte(3 + open/2/50000)}), uint16(10000+open/2%50000))
			x, y, err := simPair(nil, client, server)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				x.Close()
				y.Close()
			})
		}
		if v == nil {
			v = expvar.Get(socketsExpvarName)
		}
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				size = len(v.String())
			}
			b.ReportMetric(float64(size), "json_bytes/op")
		})
	}
}
