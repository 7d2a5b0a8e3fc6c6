package rnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/simqp"
)

// The process-wide metrics are checked by difference from a reading taken
// before the test's own connections: no test in this package runs in
// parallel with another.

// records is a slog.Handler that keeps every record it is given.
type records struct {
	mu      sync.Mutex
	list    []slog.Record
	changed chan struct{} // signalled on every record, once made by await
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.list = append(r.list, rec.Clone())
	if r.changed != nil {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
	r.mu.Unlock()
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// await waits for n records with message msg.
func (r *records) await(t *testing.T, msg string, n int) {
	t.Helper()
	r.mu.Lock()
	if r.changed == nil {
		r.changed = make(chan struct{}, 1)
	}
	for r.countLocked(msg) < n {
		r.mu.Unlock()
		select {
		case <-r.changed:
		case <-time.After(time.Minute): // a hang detector only
			t.Fatalf("no %d records %q within a minute: %v", n, msg, r.all(""))
		}
		r.mu.Lock()
	}
	r.mu.Unlock()
}

func (r *records) countLocked(msg string) int {
	n := 0
	for _, rec := range r.list {
		if rec.Message == msg {
			n++
		}
	}
	return n
}

// all returns the attributes of every record with message msg.
func (r *records) all(msg string) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var list []map[string]string
	for _, rec := range r.list {
		if msg == "" || rec.Message == msg {
			attrs := map[string]string{"msg": rec.Message}
			rec.Attrs(func(a slog.Attr) bool {
				attrs[a.Key] = a.Value.String()
				return true
			})
			list = append(list, attrs)
		}
	}
	return list
}

// find returns the attributes of the first record with message msg, and
// its level.
func (r *records) find(msg string) (map[string]string, slog.Level, bool) {
	list := r.all(msg)
	if len(list) == 0 {
		return nil, 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.IndexFunc(r.list, func(rec slog.Record) bool { return rec.Message == msg })
	return list[0], r.list[i].Level, true
}

// openCount is the open connections of transport on device in m.
func openCount(m Metrics, transport, device string) int64 {
	i := slices.IndexFunc(m.Gauges.Connections, func(o OpenConnections) bool {
		return o.Transport == transport && o.Device == device
	})
	if i < 0 {
		return 0
	}
	return m.Gauges.Connections[i].Count
}

// simPairLogged is simPair with the connections' settings logging to lg.
func simPairLogged(t *testing.T, lg *slog.Logger) (*Conn, *Conn) {
	t.Helper()
	set := (*Config)(nil).settings()
	set.logger = lg
	a, b, err := simqp.Pair(set.ring, netAddr(netip.MustParseAddrPort("10.0.0.1:40000")),
		netAddr(netip.MustParseAddrPort("10.0.0.2:7471")))
	if err != nil {
		t.Fatal(err)
	}
	return newConn(a.QP, a.Engine, set), newConn(b.QP, b.Engine, set)
}

// TestMetricsCountSimConnections: connections over the test fabric show
// in the open-connection gauge from Start to Close; a Listener counts
// what Accept returned and what its full backlog dropped, and the process
// counts the accepts.
func TestMetricsCountSimConnections(t *testing.T) {
	before := ReadMetrics()
	ln, offer := simListen(netip.MustParseAddrPort("10.0.0.2:7471"), 1, func() {})
	defer ln.Close()
	a, b := simPipe(t, nil)
	if !offer(b) {
		t.Fatal("the listener did not take the first connection")
	}
	x, y := simPipe(t, nil)
	if offer(y) {
		t.Fatal("the listener took a connection past its backlog of 1")
	}
	if got := ln.Metrics().Gauges.Backlog; got != 1 {
		t.Errorf("Backlog = %d with one connection waiting, want 1", got)
	}
	x.Close()
	y.Close()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	during := ReadMetrics()
	if got, want := openCount(during, "rdma", "simulated"), openCount(before, "rdma", "simulated")+2; got != want {
		t.Errorf("open simulated connections = %d, want %d (two open, two closed)", got, want)
	}
	if got := during.Counters.Accepts - before.Counters.Accepts; got != 1 {
		t.Errorf("Accepts grew by %d, want 1", got)
	}
	lm := ln.Metrics()
	if lm.Counters.Accepted != 1 || lm.Counters.BacklogDrops != 1 || lm.Gauges.Backlog != 0 {
		t.Errorf("listener metrics %+v; want 1 accepted, 1 backlog drop, none waiting", lm)
	}
	if len(lm.Counters.Refused) != int(lastRefusal-firstRefusal+1) || len(lm.Counters.HandshakeErrors) != int(numHandshakeFailures-lastRefusal-1) {
		t.Errorf("listener metrics name %d refusal and %d failure reasons, want every one: %+v", len(lm.Counters.Refused), len(lm.Counters.HandshakeErrors), lm.Counters)
	}
	a.Close()
	accepted.Close()
	after := ReadMetrics()
	if got, want := openCount(after, "rdma", "simulated"), openCount(before, "rdma", "simulated"); got != want {
		t.Errorf("open simulated connections after Close = %d, want %d as before", got, want)
	}
}

// TestExpvarPublishesMetrics: /debug/vars shows the process's Metrics as
// the variable "rnet" once a connection is open, and publishing again,
// or under a name another copy of the package took, does not panic.
func TestExpvarPublishesMetrics(t *testing.T) {
	a, b := simPipe(t, nil)
	defer a.Close()
	defer b.Close()
	publishExpvar() // again: a no-op
	if publishMetrics(expvarName) {
		t.Error("publishMetrics published \"rnet\" a second time")
	}
	srv := httptest.NewServer(expvar.Handler())
	defer srv.Close()
	want := ReadMetrics()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var vars map[string]json.RawMessage
	if err := json.Unmarshal(body, &vars); err != nil {
		t.Fatalf("/debug/vars: %v", err)
	}
	raw, ok := vars["rnet"]
	if !ok {
		t.Fatalf("/debug/vars has no \"rnet\" variable: %s", body)
	}
	var got Metrics
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("the rnet variable %s: %v", raw, err)
	}
	if n := openCount(got, "rdma", "simulated"); n != openCount(want, "rdma", "simulated") || n < 2 {
		t.Errorf("/debug/vars shows %d open simulated connections, want %d (at least these 2)", n, openCount(want, "rdma", "simulated"))
	}
	if got.Counters.Accepts != want.Counters.Accepts || len(got.Counters.Fallbacks) != int(FallbackPeerTCP) ||
		got.Counters.Fallbacks[FallbackRefused] != want.Counters.Fallbacks[FallbackRefused] {
		t.Errorf("/debug/vars counters %+v, want %+v", got.Counters, want.Counters)
	}
	for _, key := range []string{`"gauges"`, `"counters"`, `"pinned_bytes"`, `"handshake_errors"`, `"refused"`, `"busy"`} {
		if !bytes.Contains(raw, []byte(key)) {
			t.Errorf("the rnet variable lacks %s: %s", key, raw)
		}
	}
}

// TestPeerGoneCountedAndLogged: a connection whose transport goes
// without the peer's DISCONNECT is counted in PeersGone, and its logger
// hears of it with its addresses. Here a's queue pair is torn down under
// it: b sees its peer vanish, and a, whose queue pair b's side then
// disconnects, does too.
func TestPeerGoneCountedAndLogged(t *testing.T) {
	var recs records
	a, b := simPairLogged(t, slog.New(&recs))
	defer a.Close()
	defer b.Close()
	before := ReadMetrics().Counters.PeersGone
	simQPOf(a).Disconnect() // the transport goes, no DISCONNECT said
	if _, err := b.Read(make([]byte, 1)); !errors.Is(err, ErrPeerGone) {
		t.Fatalf("Read from the vanished peer: %v, want ErrPeerGone", err)
	}
	// Counted, then logged, as each end handles its transport event.
	recs.await(t, "rnet: peer gone", 2)
	if got := ReadMetrics().Counters.PeersGone - before; got != 2 {
		t.Errorf("PeersGone grew by %d, want 2", got)
	}
	var ends []string
	for _, attrs := range recs.all("rnet: peer gone") {
		ends = append(ends, attrs["local"]+" from "+attrs["remote"])
		if attrs["reason"] != "peer_gone" || attrs["device"] != "simulated" || attrs["error"] == "" {
			t.Errorf("peer gone logged with %v", attrs)
		}
	}
	slices.Sort(ends)
	if want := []string{"10.0.0.1:40000 from 10.0.0.2:7471", "10.0.0.2:7471 from 10.0.0.1:40000"}; !slices.Equal(ends, want) {
		t.Errorf("peer gone logged for %q, want %q", ends, want)
	}
}

// TestFallbackCountedAndLogged: a DialConn that falls back to TCP for a
// busy listener's reject counts the fallback and an open TCP connection
// until its first Close, and logs a warning with the reason and address.
func TestFallbackCountedAndLogged(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	fakeRDMA(t, func(ctx context.Context, address string) error {
		return rejectedBy(ctx, address, 28, rnetReject(rejectBusy))
	})
	var recs records
	d := &Dialer{TCPFallback: true, TCPFallbackMemory: -1, Logger: slog.New(&recs)}
	before := ReadMetrics()
	c, err := d.DialConn(context.Background(), "rdma", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	during := ReadMetrics()
	c.Close()
	c.Close()
	after := ReadMetrics()
	if got := during.Counters.Fallbacks[FallbackRefused] - before.Counters.Fallbacks[FallbackRefused]; got != 1 {
		t.Errorf("Fallbacks[refused] grew by %d, want 1", got)
	}
	if got := openCount(during, "tcp", "") - openCount(before, "tcp", ""); got != 1 {
		t.Errorf("open TCP connections grew by %d while one was open, want 1", got)
	}
	if got := openCount(after, "tcp", ""); got != openCount(before, "tcp", "") {
		t.Errorf("open TCP connections after two Closes = %d, want %d as before", got, openCount(before, "tcp", ""))
	}
	attrs, level, ok := recs.find("rnet: connected over TCP instead of RDMA")
	if !ok || level != slog.LevelWarn {
		t.Fatalf("the logger has no warning of the fallback: %v", recs.list)
	}
	if attrs["reason"] != "refused" || attrs["remote"] != tcp.Addr().String() || attrs["transport"] != "tcp" || attrs["error"] == "" {
		t.Errorf("fallback logged with %v", attrs)
	}
}

// TestListenerRefusalCountedAndLogged: a request the listener refuses
// (here for unusable private data and a full backlog, as the acceptor
// decides) is counted by reason in the Listener's and the process's
// metrics, and its logger hears a warning with the reason, the dialer's
// address and the device.
func TestListenerRefusalCountedAndLogged(t *testing.T) {
	var recs records
	ln, _ := simListen(netip.MustParseAddrPort("10.0.0.2:7471"), 1, func() {})
	defer ln.Close()
	l := ln.l
	l.log = logFor(slog.New(&recs))
	before := ReadMetrics().Counters.HandshakeErrors
	remote := netAddr(netip.MustParseAddrPort("10.0.0.9:40000"))
	p := newPendingHandshakes(1, 1, 0)
	_, err := l.admit(p, []byte{1, 2})
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("admit of unusable private data: %v, want ErrProtocol", err)
	}
	l.handshakeFailed(remote, "rxe0", err, true)
	l.handshakeFailed(remote, "rxe0", errEvicted, false)
	lm := ln.Metrics().Counters
	if lm.Refused["bad_request"] != 1 || lm.HandshakeErrors["evicted"] != 1 {
		t.Errorf("listener counters %+v; want 1 bad_request refusal and 1 evicted handshake", lm)
	}
	after := ReadMetrics().Counters.HandshakeErrors
	if after["bad_request"]-before["bad_request"] != 1 || after["evicted"]-before["evicted"] != 1 {
		t.Errorf("process handshake errors went from %v to %v; want bad_request and evicted up by 1", before, after)
	}
	attrs, level, ok := recs.find("rnet: connection request refused")
	if !ok || level != slog.LevelWarn {
		t.Fatalf("the logger has no warning of the refusal: %v", recs.list)
	}
	if attrs["reason"] != "bad_request" || attrs["remote"] != "10.0.0.9:40000" || attrs["device"] != "rxe0" ||
		attrs["listener"] != "10.0.0.2:7471" || attrs["error"] == "" {
		t.Errorf("refusal logged with %v", attrs)
	}
	if attrs, _, ok := recs.find("rnet: handshake failed"); !ok || attrs["reason"] != "evicted" {
		t.Errorf("the eviction logged as %v, %v; want reason evicted", attrs, ok)
	}
}

// TestRingGrowthLogged: a connection whose send ring grows under a large
// write tells its Logger, at debug level, which ring moved to what size.
func TestRingGrowthLogged(t *testing.T) {
	var recs records
	a, b := simPairLogged(t, slog.New(&recs))
	defer a.Close()
	defer b.Close()
	idle := a.Config().IdleBufferSize
	msg := make([]byte, 4*idle)
	go a.Write(msg)
	if _, err := io.ReadFull(b, make([]byte, len(msg))); err != nil {
		t.Fatal(err)
	}
	recs.await(t, "rnet: ring resized", 1)
	attrs, level, _ := recs.find("rnet: ring resized")
	if level != slog.LevelDebug || (attrs["ring"] != "send" && attrs["ring"] != "receive") || attrs["device"] != "simulated" ||
		attrs["size"] == "" || attrs["size"] == strconv.Itoa(idle) || attrs["local"] == "" {
		t.Errorf("ring growth logged at %v with %v; want debug, the ring and a size other than the idle %d", level, attrs, idle)
	}
}
