//go:build linux && cgo

package rnet

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// TestRXEHandshakeFloodKeepsRDMA: during a flood of connection requests
// that never complete, which keeps every pending-handshake slot of the
// listener stalled and as many requests in line for one, an honest client
// with TCPFallback connects over RDMA every time, within its 3 s
// RDMAAttemptTimeout: its request waits in line, first come first served,
// while the acceptor goes on reading requests, and gets a slot as stalled
// handshakes turn stale. No refusal is remembered.
func TestRXEHandshakeFloodKeepsRDMA(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hang guard
	defer cancel()
	const (
		maxPending      = minDefaultPending // few slots, so that the flood fills them
		stalledRequests = 300
		honestDials     = 10
		// Every slot holds a stalled request and as many more wait in
		// line, as in TestRXEHandshakeFlood: a real dial waits behind
		// them for two turnovers of the slots, about 2 s.
		flooders = 2 * maxPending
	)
	ln, err := (&ListenConfig{MaxPendingHandshakes: maxPending}).ListenDual(ctx, "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ln.RDMAError() != nil {
		t.Fatalf("the dual listener has no RDMA side: %v", ln.RDMAError())
	}
	addr := ln.Addr().String()
	defer refusedRecently.forget("rdma", addr)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	target := netip.MustParseAddrPort(addr)
	flood := startStallFlood(t, ctx, pair, target, flooders, stalledRequests, 0)
	defer flood.stopNow()

	before := DialFallbackStats()
	d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, TCPFallback: true}
	for i := range honestDials {
		// Spread over the flood by its count, once its stalled requests
		// have filled every slot.
		flood.waitAnswered(ctx, int64(maxPending+i*(stalledRequests-2*maxPending)/honestDials))
		busy0 := flood.refusedBusy.Load()
		start := time.Now()
		c, err := d.DialConn(ctx, "rdma", addr)
		if err != nil {
			t.Fatalf("dial %d during the flood: %v", i, err)
		}
		took := time.Since(start)
		echoOnceClient(t, c)
		c.Close()
		if tc, ok := c.(*TCPConn); ok {
			t.Errorf("dial %d during the flood fell back after %v: %v (%v)", i, took.Round(time.Millisecond), tc.Reason, tc.Cause)
			continue
		}
		t.Logf("dial %d connected over RDMA in %v (%d stalled requests answered, %d flood requests refused as busy meanwhile)",
			i, took.Round(time.Millisecond), flood.answered.Load(), flood.refusedBusy.Load()-busy0)
	}
	flood.stopNow()
	after := DialFallbackStats()
	t.Logf("%d flooders: %d stalled requests answered, %d given up by the listener, %d refused as busy",
		flooders, flood.answered.Load(), flood.givenUp.Load(), flood.refusedBusy.Load())
	if after.RDMA-before.RDMA != honestDials {
		t.Errorf("DialFallbackStats went from %+v to %+v, want %d more over RDMA and none over TCP", before, after, honestDials)
	}
	if why := refusedRecently.lookup("rdma", addr, time.Now()); why != nil {
		t.Errorf("the flood left a remembered refusal: %v", why)
	}
}

// echoOnceClient writes a message on c and reads it back from an echoing
// server.
func echoOnceClient(t *testing.T, c net.Conn) {
	t.Helper()
	msg := []byte("through the flood")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
		t.Fatalf("echo: %q, %v", got, err)
	}
}
