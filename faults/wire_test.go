//go:build linux && cgo

package faults

import (
	"io"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/rnet"
)

// This file runs last in the package (Go runs test files in name order):
// it cuts the wire, and although it puts everything back, a failure
// halfway should not take the other tests with it.

// TestFaultLinkDown cuts the wire (netem loss 100% on rvm0: everything the
// client sends, data and acknowledgements, is lost) for longer than the transport's
// retry budget under traffic. Both ends must fail with a clear error, Close
// must still release everything, and once the link is back new connections
// work.
func TestFaultLinkDown(t *testing.T) {
	pair := needLab(t)
	ln := listen(t, pair, keepCfg)
	before := takeSnapshot(t)
	c1, c2 := connect(t, pair, ln, keepCfg)
	defer closeWithin(t, c1, 30*time.Second)
	defer closeWithin(t, c2, 30*time.Second)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		send(c1, 1<<40, 64<<10, 3) // until the link failure ends it
	}()
	c2.SetReadDeadline(time.Now().Add(wait))
	if _, err := io.ReadFull(c2, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	// `ip link set rvm0 down` would do the same, but it flushes the lab's
	// policy routes, which then have to be rebuilt; a dead wire is the
	// fault that matters to the connections.
	netem(t, "loss", "100%")
	start := time.Now()

	type result struct {
		err  error
		took time.Duration
	}
	errs := make(chan result, 2)
	for _, c := range []*rnet.Conn{c1, c2} {
		go func() {
			err, took := readErr(c, start, errorLimit)
			errs <- result{err, took}
		}()
	}
	for i, name := range []string{"first", "second"} {
		r := <-errs
		if isTimeout(r.err) || r.err == io.EOF {
			t.Fatalf("%s end: Read = %v after %v with the link down, want an error", name, r.err, r.took)
		}
		t.Logf("link down: %s end failed after %v: %v", name, r.took.Round(time.Millisecond), r.err)
		_ = i
	}
	wg.Wait()
	d1 := closeWithin(t, c1, 30*time.Second)
	d2 := closeWithin(t, c2, 30*time.Second)
	t.Logf("Close of both ends with the link still down took %v and %v", d1.Round(time.Millisecond), d2.Round(time.Millisecond))
	run(t, "tc", "qdisc", "del", "dev", "rvm0", "root")
	checkNoLeaks(t, before, "link-down connections")
	n1, n2 := connect(t, pair, ln, nil)
	roundTrip(t, n1, n2, "link is back")
	n1.Close()
	n2.Close()
}
