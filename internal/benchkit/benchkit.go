// Package benchkit holds the bodies of rnet's benchmarks, written against
// net.Conn and net.Listener so that one body measures rnet (over the
// simulated fabric or a device) and TCP alike, in the same run.
//
// Every body reports MB/s (b.SetBytes), ns/op, allocs/op (b.ReportAllocs)
// and, for each counter it is given (Counters), "cgo/op" (crossings into C
// per operation) and "locks/op" (mutex acquisitions per operation); with
// both, "locks/cgo".
// Stream bodies also report "cgo/call", crossings per Read or Write call of
// either end, the unit of rnet's target of at most one.
// Latency bodies add p50-ns and p99-ns. No body ever fails on time.
package benchkit

import (
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/stats"
)

// Counter returns a process-wide count that only grows.
type Counter func() uint64

// Counters are the counts a body reports per operation; a nil one is not
// reported.
type Counters struct {
	// Cgo counts crossings into C (verbs.CgoCalls): cgo/op, and cgo/call
	// in the stream bodies.
	Cgo Counter
	// Locks counts mutex acquisitions (lockcount.Taken, in a build with the
	// rnet_lockcount tag): locks/op.
	Locks Counter
}

// counts are the values of Counters at the start of a measurement.
type counts struct{ cgo, locks uint64 }

func read(c Counter) uint64 {
	if c == nil {
		return 0
	}
	return c()
}

func (cs Counters) begin() counts { return counts{cgo: read(cs.Cgo), locks: read(cs.Locks)} }

// report adds cgo/op and locks/op for the counters there are, and with
// both, locks/cgo: a call that spins crosses into C and takes locks once
// per round, so the two per op grow with the time it spins, and their
// ratio, the locks per crossing, is what stays put.
func (cs Counters) report(b *testing.B, start counts) {
	var cgo, locks uint64
	if cs.Cgo != nil {
		cgo = cs.Cgo() - start.cgo
		b.ReportMetric(float64(cgo)/float64(b.N), "cgo/op")
	}
	if cs.Locks != nil {
		locks = cs.Locks() - start.locks
		b.ReportMetric(float64(locks)/float64(b.N), "locks/op")
	}
	if cs.Cgo != nil && cs.Locks != nil && cgo > 0 {
		b.ReportMetric(float64(locks)/float64(cgo), "locks/cgo")
	}
}

// reportPerCall adds cgo/call: crossings per Read or Write call, over the
// calls both ends made.
func (cs Counters) reportPerCall(b *testing.B, start counts, calls int64) {
	if cs.Cgo != nil && calls > 0 {
		b.ReportMetric(float64(cs.Cgo()-start.cgo)/float64(calls), "cgo/call")
	}
}

// countingReader counts the Read calls io.ReadFull makes.
type countingReader struct {
	r     io.Reader
	calls int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.calls++
	return c.r.Read(p)
}

// Throughput measures b.N writes of size bytes from w to r, until r has read
// them all. One op is one Write call.
func Throughput(b *testing.B, w, r net.Conn, size int, cs Counters) {
	buf := make([]byte, size)
	rbuf := make([]byte, max(size, 64<<10))
	done := make(chan error, 1)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	// Warm up both directions' credits and the reader goroutine's stack.
	total := int64(size) * int64(b.N)
	b.ResetTimer()
	c0 := cs.begin()
	var reads int64 // read by the main goroutine only after done
	go func() {
		var got int64
		for got < total {
			n, err := r.Read(rbuf)
			reads++
			got += int64(n)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < b.N; i++ {
		if _, err := w.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cs.report(b, c0)
	cs.reportPerCall(b, c0, int64(b.N)+reads)
}

// PingPong measures round trips of size bytes: c writes, s echoes, c reads
// the echo in full. One op is one round trip; p50-ns and p99-ns are reported.
func PingPong(b *testing.B, c, s net.Conn, size int, cs Counters) {
	buf := make([]byte, size)
	sbuf := make([]byte, size)
	rtt := make([]time.Duration, b.N)
	done := make(chan error, 1)
	n := b.N
	sr, cr := &countingReader{r: s}, &countingReader{r: c}
	go func() {
		for i := 0; i < n; i++ {
			if _, err := io.ReadFull(sr, sbuf); err != nil {
				done <- err
				return
			}
			if _, err := s.Write(sbuf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cs.begin()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(cr, buf); err != nil {
			b.Fatal(err)
		}
		rtt[i] = time.Since(t0)
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	cs.report(b, c0)
	cs.reportPerCall(b, c0, 2*int64(n)+sr.calls+cr.calls) // the writes, then the reads
	ReportPercentiles(b, rtt)
}

// ReportPercentiles reports p50-ns and p99-ns of d (which it sorts).
func ReportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(stats.Percentile(d, 50)), "p50-ns")
	b.ReportMetric(float64(stats.Percentile(d, 99)), "p99-ns")
}

// Sizes are the write sizes of the throughput benchmarks.
var Sizes = []int{64, 1 << 10, 4 << 10, 64 << 10, 1 << 20}

// LatencySizes are the message sizes of the ping-pong benchmarks.
var LatencySizes = []int{64, 4 << 10}

// SizeName is 64B, 1KiB, 64KiB, 1MiB.
func SizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// TCPPair returns a connected TCP pair: the server end listens on listenIP
// and the client connects from fromIP (empty: any). It is how every
// benchmark gets its baseline.
func TCPPair(tb testing.TB, listenIP, fromIP string) (client, server net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(listenIP, "0"))
	if err != nil {
		tb.Fatal(err)
	}
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
	d := net.Dialer{}
	if fromIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(fromIP)}
	}
	client, err = d.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	server = <-acc
	if server == nil {
		tb.Fatal("accept failed")
	}
	tb.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// Drain reads c to EOF; handy for servers.
func Drain(c net.Conn) { io.Copy(io.Discard, c) }
