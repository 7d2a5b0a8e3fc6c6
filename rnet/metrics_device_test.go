//go:build linux && cgo

package rnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// rdmaObject is one object of `rdma -j resource show qp|mr`. Its pid is the
// thread that created it; the kernel's own have none.
type rdmaObject struct {
	Pid   int    `json:"pid"`
	LQPN  uint32 `json:"lqpn"`
	MRLen int64  `json:"mrlen"`
}

// heldByProcess is what `rdma resource show` lists for this process.
type heldByProcess struct {
	qps, mrs    int
	pinnedBytes int64
	qpNumbers   map[uint32]bool
}

// processObjects lists this process's objects of kind (qp, mr), from a
// dump that holds as many objects as the summary read before and after it
// counts: the kernel's dump of many objects comes in many netlink
// messages and can miss some.
func processObjects(t *testing.T, kind string) []rdmaObject {
	t.Helper()
	for range 5 {
		before := procstat.Resources(t)[kind]
		out, err := exec.Command("rdma", "-j", "resource", "show", kind).Output()
		if err != nil {
			t.Fatalf("rdma -j resource show %s: %v", kind, err)
		}
		after := procstat.Resources(t)[kind]
		var all []rdmaObject
		if err := json.Unmarshal(bytes.TrimSpace(out), &all); err != nil {
			t.Fatalf("rdma -j resource show %s: %v: %s", kind, err, out)
		}
		if before != after || len(all) != after {
			continue
		}
		tids := procstat.Threads(t, os.Getpid())
		var mine []rdmaObject
		for _, o := range all {
			if o.Pid != 0 && tids[o.Pid] {
				mine = append(mine, o)
			}
		}
		return mine
	}
	t.Fatalf("rdma -j resource show %s never listed as many objects as rdma resource show counts", kind)
	return nil
}

// heldNow is what the rdma tool lists for this process now.
func heldNow(t *testing.T) heldByProcess {
	t.Helper()
	h := heldByProcess{qpNumbers: map[uint32]bool{}}
	for _, o := range processObjects(t, "qp") {
		h.qps++
		h.qpNumbers[o.LQPN] = true
	}
	for _, o := range processObjects(t, "mr") {
		h.mrs++
		h.pinnedBytes += o.MRLen
	}
	return h
}

// agrees reports whether m counts what h lists.
func agrees(m Metrics, h heldByProcess) bool {
	return m.Gauges.QueuePairs == int64(h.qps) && m.Gauges.MemoryRegions == int64(h.mrs) && m.Gauges.PinnedBytes == h.pinnedBytes
}

// awaitAgreement waits up to 10 s for the rdma tool to list what
// ReadMetrics counts (rxe destroys queue pairs from a work queue, after
// the call that destroyed them returned) and returns both.
func awaitAgreement(t *testing.T) (Metrics, heldByProcess) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, h := ReadMetrics(), heldNow(t)
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
// connection's QP numbers are among those it lists; once they and the
// listener are closed, Metrics is back to where it started, and so is the
// rdma tool.
func TestRXEMetricsAgreeWithRdmaTool(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	base, baseHeld := awaitAgreement(t)
	if !agrees(base, baseHeld) {
		t.Fatalf("before any connection, Metrics %+v and the rdma tool (%d QPs, %d MRs, %d bytes) disagree",
			base.Gauges, baseHeld.qps, baseHeld.mrs, baseHeld.pinnedBytes)
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
			conns, m.Gauges.QueuePairs, m.Gauges.MemoryRegions, m.Gauges.PinnedBytes, h.qps, h.mrs, h.pinnedBytes)
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
	for _, c := range open {
		info, err := c.Info()
		if err != nil {
			t.Fatal(err)
		}
		if !h.qpNumbers[info.QPNumber] || !h.qpNumbers[info.RemoteQPNumber] {
			t.Errorf("QP numbers %d and %d (remote) of %v are not among those the rdma tool lists for the process",
				info.QPNumber, info.RemoteQPNumber, c.LocalAddr())
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
			after.Gauges.QueuePairs, after.Gauges.MemoryRegions, after.Gauges.PinnedBytes, afterHeld.qps, afterHeld.mrs, afterHeld.pinnedBytes)
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
