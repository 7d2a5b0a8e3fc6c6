//go:build linux && cgo

package faults

import (
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/rnet"
)

// fullLength reports whether the volume tests (TestSoak, TestManyConnections)
// run at full length: not with -short, and not under the race detector,
// which slows every memory access several times over. Their worth at full
// length is volume and checksums, not interleavings, which their shorter
// runs under the detector cross as well; make test-device runs them once
// more without it. (TestChurn's cycles wait on the kernel, not on memory
// accesses: it keeps its length under the detector.)
func fullLength() bool { return !testing.Short() && !raceEnabled }

// raceSoakBytes is TestSoak's volume when not at full length: enough to wrap
// the rings hundreds of times and grow them.
const raceSoakBytes = 64 << 20

// soakBytes is the soak's total volume: RNET_SOAK_BYTES, else 1 GiB (64 MiB
// with -short).
func soakBytes(t *testing.T) int64 {
	if v, ok := soakBytesFromEnv(t); ok {
		return v
	}
	if testing.Short() {
		return 64 << 20
	}
	return 1 << 30
}

func soakBytesFromEnv(t *testing.T) (int64, bool) {
	v := os.Getenv("RNET_SOAK_BYTES")
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		t.Fatalf("RNET_SOAK_BYTES=%q: want a positive byte count", v)
	}
	return n, true
}

// duplex streams total bytes over c1/c2, half each way at once, in random
// writes of 1 B to maxWrite, and checks both streams arrive whole. It returns
// the elapsed time.
func duplex(t *testing.T, c1, c2 *rnet.Conn, total int64, maxWrite int, seed uint64) time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	var sent, got [2]stream
	var errs [4]error
	start := time.Now()
	one := func(i int, w, r *rnet.Conn) {
		wg.Add(2)
		go func() {
			defer wg.Done()
			sent[i], errs[2*i] = send(w, total/2, maxWrite, seed+uint64(i))
			if err := w.CloseWrite(); err != nil && errs[2*i] == nil {
				errs[2*i] = err
			}
		}()
		go func() {
			defer wg.Done()
			got[i], errs[2*i+1] = recv(r, seed+uint64(i))
		}()
	}
	one(0, c1, c2)
	one(1, c2, c1)
	wg.Wait()
	elapsed := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Errorf("stream %d %s: %v", i/2, []string{"writer", "reader"}[i%2], err)
		}
	}
	for i := range sent {
		if sent[i] != got[i] {
			t.Errorf("direction %d: sent %d bytes crc %#x, received %d bytes crc %#x (%d lost)",
				i, sent[i].bytes, sent[i].crc, got[i].bytes, got[i].crc, sent[i].bytes-got[i].bytes)
		}
	}
	return elapsed
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e6 }

// TestSoak moves RNET_SOAK_BYTES (1 GiB) in random-size writes of 1 B to
// 1 MiB, both directions at once, over rxe across the veth, checksummed.
// Under the race detector it moves raceSoakBytes unless RNET_SOAK_BYTES is
// set. Both ends' rings must have grown on the way.
func TestSoak(t *testing.T) {
	pair := needLab(t)
	total := soakBytes(t)
	if _, set := soakBytesFromEnv(t); !fullLength() && !set && total > raceSoakBytes {
		t.Logf("race detector: %d MiB instead of %d MiB (the full volume runs without -race)", raceSoakBytes>>20, total>>20)
		total = raceSoakBytes
	}
	ln := listen(t, pair, nil)
	c1, c2 := connect(t, pair, ln, nil)
	defer c1.Close()
	defer c2.Close()
	d := duplex(t, c1, c2, total, 1<<20, 1)
	t.Logf("soak: %d MiB both ways at once, 0 bytes lost or corrupted, in %v: %.1f MB/s total",
		total>>20, d.Round(time.Millisecond), mbps(total, d))
	s1, s2 := c1.Stats(), c2.Stats()
	t.Logf("client stats %+v", s1)
	t.Logf("server stats %+v", s2)
	if s1.RingGrowths == 0 || s2.RingGrowths == 0 {
		t.Errorf("the rings never grew (client %d, server %d growths): the soak did not load them", s1.RingGrowths, s2.RingGrowths)
	}
}

// TestSoakLoss is the soak with 2% loss and 1 ms delay on the wire from
// client to server (data one way, acknowledgements the other): the RC
// transport retransmits and every byte arrives. Loss makes rxe crawl, so it
// moves 1/64 of the soak volume (16 MiB by default).
func TestSoakLoss(t *testing.T) {
	pair := needLab(t)
	total := soakBytes(t) / 64
	ln := listen(t, pair, nil)
	c1, c2 := connect(t, pair, ln, nil)
	defer c1.Close()
	defer c2.Close()
	netem(t, "loss", "2%", "delay", "1ms")
	d := duplex(t, c1, c2, total, 1<<20, 2)
	t.Logf("soak under netem loss 2%% delay 1ms: %d MiB both ways, 0 bytes lost or corrupted, in %v: %.2f MB/s total",
		total>>20, d.Round(time.Millisecond), mbps(total, d))
}
