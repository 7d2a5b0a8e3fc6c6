//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// agrees reports whether m counts what h lists.
func agrees(m Metrics, h procstat.RDMAHeld) bool {
	return m.Gauges.QueuePairs == int64(h.QPs) && m.Gauges.MemoryRegions == int64(h.MRs) && m.Gauges.PinnedBytes == h.PinnedBytes
}

// awaitAgreement waits up to 10 s for the rdma tool to list what
// ReadMetrics counts (rxe destroys queue pairs from a work queue, after
// the call that destroyed them returned) and returns both.
func awaitAgreement(t *testing.T) (Metrics, procstat.RDMAHeld) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, h := ReadMetrics(), procstat.HeldRDMA(t)
		if agrees(m, h) || time.Now().After(deadline) {
			return m, h
		}
		time.Sleep(20 * time.Millisecond) // between readings of a real condition
	}
}

// openRDMA sums the open RDMA connections on devices in m.
func openRDMA(m Metrics) int64 {
	var n int64
	for _, o := range m.Gauges.Connections {
		if o.Transport == "rdma" && o.Device != "simulated" {
			n += o.Count
		}
	}
	return n
}

// TestRXEMetricsAgreeWithRdmaTool: with 100 connections open (both ends in
// this process), Metrics counts the queue pairs, memory regions and
// pinned bytes `rdma resource show` lists for the process, and each
// connection's QP numbers are among those it lists, ReadSockets listing
// the same; once they and the
// listener are closed, Metrics is back to where it started, and so is the
// rdma tool.
func TestRXEMetricsAgreeWithRdmaTool(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	base, baseHeld := awaitAgreement(t)
	if !agrees(base, baseHeld) {
		t.Fatalf("before any connection, Metrics %+v and the rdma tool (%d QPs, %d MRs, %d bytes) disagree",
			base.Gauges, baseHeld.QPs, baseHeld.MRs, baseHeld.PinnedBytes)
	}
	ln, err := (&ListenConfig{Backlog: 200}).Listen(context.Background(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const conns = 100
	d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, Timeout: time.Minute}
	var open []*Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for range conns {
		c, err := d.Dial("rdma", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.AcceptRDMA()
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		open = append(open, c, s)
	}

	m, h := awaitAgreement(t)
	if !agrees(m, h) {
		t.Errorf("with %d connections, Metrics counts %d QPs, %d MRs, %d pinned bytes; the rdma tool lists %d, %d, %d",
			conns, m.Gauges.QueuePairs, m.Gauges.MemoryRegions, m.Gauges.PinnedBytes, h.QPs, h.MRs, h.PinnedBytes)
	}
	if got := m.Gauges.QueuePairs - base.Gauges.QueuePairs; got != 2*conns {
		t.Errorf("QueuePairs grew by %d, want %d (both ends of %d connections)", got, 2*conns, conns)
	}
	if got := openRDMA(m) - openRDMA(base); got != 2*conns {
		t.Errorf("open RDMA connections grew by %d, want %d", got, 2*conns)
	}
	if got := m.Counters.Dials - base.Counters.Dials; got != conns {
		t.Errorf("Dials grew by %d, want %d", got, conns)
	}
	if got := m.Counters.Accepts - base.Counters.Accepts; got != conns {
		t.Errorf("Accepts grew by %d, want %d", got, conns)
	}
	if lm := ln.Metrics(); lm.Counters.Accepted != conns || lm.Gauges.PendingHandshakes != 0 || lm.Gauges.Backlog != 0 {
		t.Errorf("listener metrics %+v, want %d accepted and nothing pending", lm, conns)
	}
	sockets := ReadSockets(0)
	for _, c := range open {
		info, err := c.Info()
		if err != nil {
			t.Fatal(err)
		}
		if !h.QPNumbers[info.QPNumber] || !h.QPNumbers[info.RemoteQPNumber] {
			t.Errorf("QP numbers %d and %d (remote) of %v are not among those the rdma tool lists for the process",
				info.QPNumber, info.RemoteQPNumber, c.LocalAddr())
			break
		}
		// rnet stat's view: the connection listed with the same number.
		if cs, ok := findConn(sockets, c.LocalAddr().String(), c.RemoteAddr().String()); !ok || cs.QPNumber != info.QPNumber || cs.Device != info.Device {
			t.Errorf("ReadSockets lists %v as %+v (listed %t); want queue pair %d on %s", c.LocalAddr(), cs, ok, info.QPNumber, info.Device)
			break
		}
	}

	for _, c := range open {
		c.Close()
	}
	open = nil
	ln.Close()
	after, afterHeld := awaitAgreement(t)
	if !agrees(after, afterHeld) {
		t.Errorf("after Close, Metrics counts %d QPs, %d MRs, %d pinned bytes; the rdma tool lists %d, %d, %d",
			after.Gauges.QueuePairs, after.Gauges.MemoryRegions, after.Gauges.PinnedBytes, afterHeld.QPs, afterHeld.MRs, afterHeld.PinnedBytes)
	}
	if after.Gauges.QueuePairs != base.Gauges.QueuePairs || after.Gauges.MemoryRegions != base.Gauges.MemoryRegions ||
		after.Gauges.PinnedBytes != base.Gauges.PinnedBytes || openRDMA(after) != openRDMA(base) {
		t.Errorf("after Close, gauges %+v; want those before the connections, %+v", after.Gauges, base.Gauges)
	}
}

// TestRXEListenerLogsAndCountsRefusal: a listener with a Logger that
// refuses a request with unusable private data logs a warning naming the
// reason, the dialer's address and the device, and counts it in its own
// and the process's metrics; a Dialer with a Logger whose dial nothing
// listens for logs the reject.
func TestRXEListenerLogsAndCountsRefusal(t *testing.T) {
	pair := rdmatest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var recs records
	ln, err := (&ListenConfig{Logger: slog.New(&recs)}).Listen(ctx, "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	target := ln.Addr().(*Addr).AddrPort
	before := ReadMetrics().Counters.HandshakeErrors

	// Private data padded with zeros: no credits, no buffers.
	id, release := rawRequest(ctx, t, pair.Client, target, []byte{1, 2}, 0x1234)
	defer release()
	if _, err := id.Await(ctx, cm.EventEstablished); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("the listener answered %v, want a reject", err)
	}
	recs.await(t, "rnet: connection request refused", 1)
	attrs, level, _ := recs.find("rnet: connection request refused")
	if level != slog.LevelWarn || attrs["reason"] != "bad_request" || attrs["device"] == "" ||
		attrs["remote"] != id.LocalAddr().String() || attrs["listener"] != ln.Addr().String() {
		t.Errorf("the refusal logged at %v with %v; want warn, reason bad_request, the device and %v", level, attrs, id.LocalAddr())
	}
	if got := ln.Metrics().Counters.Refused["bad_request"]; got != 1 {
		t.Errorf("the listener counts %d bad_request refusals, want 1", got)
	}
	if got := ReadMetrics().Counters.HandshakeErrors["bad_request"] - before["bad_request"]; got != 1 {
		t.Errorf("the process's bad_request handshake errors grew by %d, want 1", got)
	}

	var dialRecs records
	addr := ln.Addr().String()
	ln.Close()
	d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, Timeout: 30 * time.Second, Logger: slog.New(&dialRecs)}
	if _, err := d.Dial("rdma", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a dial where nothing listens: %v, want ECONNREFUSED", err)
	}
	attrs, level, ok := dialRecs.find("rnet: dial failed")
	if !ok || level != slog.LevelWarn || attrs["reason"] != "rejected" || attrs["remote"] != addr || attrs["error"] == "" {
		t.Errorf("the dial's reject logged (%v) at %v with %v; want warn, reason rejected, remote %s", ok, level, attrs, addr)
	}
}
