package rnet

import (
	"io"
	"testing"
)

// BenchmarkSimWriteRead64 is a 64-byte Write on one end and the Read of it
// on the other over the simulated fabric: the data path the metrics must
// not slow (see docs/performance.md).
func BenchmarkSimWriteRead64(b *testing.B) {
	x, y := simPipe(b, nil)
	defer x.Close()
	defer y.Close()
	msg := make([]byte, 64)
	buf := make([]byte, 64)
	b.SetBytes(64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := x.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(y, buf); err != nil {
			b.Fatal(err)
		}
	}
}
