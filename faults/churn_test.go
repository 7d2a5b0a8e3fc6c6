//go:build linux && cgo

package faults

import (
	"io"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/rnet"
)

// small keeps per-connection memory low for the churn and scale tests.
var small = &rnet.Config{SendBufferSize: 16 << 10, RecvBufferSize: 16 << 10, SendQueueSize: 64, RecvQueueSize: 64, Linger: 2 * time.Second}

// TestChurn connects and closes 1000 times (100 with -short), every third
// connection closed mid-stream with a write in flight, and checks that QPs,
// CQs, MRs, PDs, cm ids, fds and goroutines all come back to where they
// were.
func TestChurn(t *testing.T) {
	pair := needLab(t)
	cycles := 1000
	if testing.Short() {
		cycles = 100
	}
	ln := listen(t, pair, small)
	// Warm up: librdmacm opens its devices once per process.
	a, b := connect(t, pair, ln, small)
	a.Close()
	b.Close()
	before := takeSnapshot(t)
	start := time.Now()
	var writers sync.WaitGroup
	midStream := 0
	for i := 0; i < cycles; i++ {
		c1, c2 := connect(t, pair, ln, small)
		switch i % 3 {
		case 0:
			// Closed mid-stream: a write larger than both rings is in
			// progress while both ends close.
			midStream++
			writers.Add(1)
			go func() {
				defer writers.Done()
				c1.Write(pool[:256<<10])
			}()
			// The first byte arriving proves the Write began; the rest,
			// larger than both rings, is still on its way.
			if _, err := io.ReadFull(c2, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
		case 1:
			roundTrip(t, c1, c2, "x")
		}
		// Both ends at once: c1 alone would wait Linger for a reader
		// that is not reading.
		var closing sync.WaitGroup
		closing.Go(func() { c2.Close() })
		c1.Close()
		closing.Wait()
	}
	writers.Wait()
	t.Logf("%d connect/close cycles (%d closed mid-stream) in %v", cycles, midStream, time.Since(start).Round(time.Millisecond))
	checkNoLeaks(t, before, "churn")
}

// TestManyConnections moves data over 200 connections at once (50 with
// -short or under the race detector, see fullLength), each checksummed, then
// closes them all with nothing leaked.
func TestManyConnections(t *testing.T) {
	pair := needLab(t)
	n := 200
	if !fullLength() {
		n = 50
	}
	const perConn = 256 << 10
	ln := listen(t, pair, small)
	a, b := connect(t, pair, ln, small)
	a.Close()
	b.Close()
	before := takeSnapshot(t)
	clients := make([]*rnet.Conn, n)
	servers := make([]*rnet.Conn, n)
	for i := range n {
		clients[i], servers[i] = connect(t, pair, ln, small)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for i := range n {
		for dir, pair := range [2][2]*rnet.Conn{{clients[i], servers[i]}, {servers[i], clients[i]}} {
			w, r := pair[0], pair[1]
			seed := uint64(i*2 + dir)
			wg.Add(2)
			go func() {
				defer wg.Done()
				s, err := send(w, perConn, 64<<10, seed)
				if err == nil {
					err = w.CloseWrite()
				}
				if err != nil {
					errs <- err
				}
				_ = s
			}()
			go func() {
				defer wg.Done()
				got, err := recv(r, seed)
				if err != nil {
					errs <- err
					return
				}
				want := sentStream(perConn, 64<<10, seed)
				if got != want {
					t.Errorf("connection %d direction %d: got %d bytes crc %#x, want %d bytes crc %#x", seed/2, dir, got.bytes, got.crc, want.bytes, want.crc)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	d := time.Since(start)
	t.Logf("%d connections moved %d KiB each way at once, all checksummed, in %v (%.1f MB/s total)",
		n, perConn>>10, d.Round(time.Millisecond), mbps(int64(2*n*perConn), d))
	for i := range n {
		clients[i].Close()
		servers[i].Close()
	}
	checkNoLeaks(t, before, "200 connections")
}

// sentStream is what send writes for these arguments, computed without a
// connection.
func sentStream(total int64, maxWrite int, seed uint64) stream {
	s, _ := send(discard{}, total, maxWrite, seed)
	return s
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }
