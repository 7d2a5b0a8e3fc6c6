package rnet

import (
	"expvar"
	"net/netip"
	"testing"
)

// BenchmarkSocketsExpvar2000 is one read of the "rnet_sockets" variable,
// as a scrape of /debug/vars makes it, with 2000 simulated connections
// open (see docs/performance.md).
func BenchmarkSocketsExpvar2000(b *testing.B) {
	server := netip.MustParseAddrPort("10.0.9.2:7481")
	for i := range 1000 {
		x, y, err := simPair(nil, netip.AddrPortFrom(netip.MustParseAddr("10.0.9.1"), uint16(20000+i)), server)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			x.Close()
			y.Close()
		})
	}
	v := expvar.Get(socketsExpvarName)
	if v == nil {
		b.Fatalf("no %s variable", socketsExpvarName)
	}
	b.ReportAllocs()
	var size int
	for b.Loop() {
		size = len(v.String())
	}
	b.ReportMetric(float64(size), "json_bytes/op")
}
