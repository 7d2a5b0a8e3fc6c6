package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/internal/perfjson"
	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnettest"
)

// startServer serves on fresh listeners of server's transport and returns
// their addresses; the test fails if the server ends with an error.
func startServer(t *testing.T, server *transport, host string, data http.Handler) (grpcAddr, httpAddr string) {
	t.Helper()
	gln, err := server.Listen(net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	hln, err := server.Listen(net.JoinHostPort(host, "0"))
	if err != nil {
		gln.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serveOn(server, gln, hln, "", data) }()
	t.Cleanup(func() {
		gln.Close()
		hln.Close()
		if err := <-done; err != nil && !strings.Contains(err.Error(), "closed") {
			t.Errorf("server: %v", err)
		}
	})
	return gln.Addr().String(), hln.Addr().String()
}

// runAll runs the workloads that match only at a small scale and returns
// their results.
func runAll(t *testing.T, client *transport, grpcAddr, httpAddr, only, perf string) ([]perfjson.AppResult, error) {
	t.Helper()
	var out bytes.Buffer
	err := runClient(context.Background(), client, grpcAddr, httpAddr, 0.02, regexp.MustCompile(only), perf, &out)
	var results []perfjson.AppResult
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		var r perfjson.AppResult
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		results = append(results, r)
	}
	return results, err
}

// checkResults checks that every workload reported calls, times and work
// on both sides.
func checkResults(t *testing.T, results []perfjson.AppResult, transport string) {
	t.Helper()
	if len(results) != len(workloads()) {
		t.Fatalf("%d results, want one per workload (%d)", len(results), len(workloads()))
	}
	for i, r := range results {
		w := workloads()[i]
		if r.Workload != w.name || r.Size != w.size || r.Concurrency != w.conc || r.Transport != transport {
			t.Errorf("result %d is %s/%d/c%d over %s, want %s over %s", i, r.Workload, r.Size, r.Concurrency, r.Transport, w.id(), transport)
		}
		if r.Calls < 10 || r.Seconds <= 0 || r.CallsPerSec <= 0 || r.MBps <= 0 {
			t.Errorf("%s: calls %d in %v s, %v calls/s, %v MB/s", w.id(), r.Calls, r.Seconds, r.CallsPerSec, r.MBps)
		}
		if w.name != "grpc-stream" && (r.P50Us <= 0 || r.P99Us < r.P50Us) {
			t.Errorf("%s: p50 %v µs, p99 %v µs", w.id(), r.P50Us, r.P99Us)
		}
		for side, work := range map[string]perfjson.Work{"client": r.Client, "server": r.Server} {
			// The runtime samples one in eight of a goroutine's wakeups:
			// only a goroutine woken for each of at least eight calls is
			// sure to show, as the caller and the server's reader are in
			// a unary workload with one caller.
			if work.Wakeups < 0 || (w.name == "grpc-unary" && w.conc == 1 && work.Wakeups == 0) {
				t.Errorf("%s: %s: wakeups %v: %+v", w.id(), side, work.Wakeups, work)
			}
			if transport == "rdma" && (work.RNet["MessagesSent"] <= 0 || work.RNet["MessagesReceived"] <= 0) {
				t.Errorf("%s: %s: no rnet messages: %v", w.id(), side, work.RNet)
			}
			if transport == "tcp" && work.RNet != nil {
				t.Errorf("%s: %s: rnet counters over TCP: %v", w.id(), side, work.RNet)
			}
		}
	}
}

func TestWorkloadsOverTCP(t *testing.T) {
	server := &transport{tcp: true}
	g, h := startServer(t, server, "127.0.0.1", http.HandlerFunc(dataHandler))
	results, err := runAll(t, &transport{tcp: true}, g, h, "", "")
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, results, "tcp")
	for _, r := range results {
		if r.Client.Syscalls <= 0 || r.Server.Syscalls <= 0 {
			t.Errorf("%s/%d: no system calls over TCP: client %v, server %v", r.Workload, r.Size, r.Client.Syscalls, r.Server.Syscalls)
		}
	}
}

// TestWorkloadsOverFabric runs every workload over rnet connections on
// rnettest's simulated fabric, whose counters both sides report.
func TestWorkloadsOverFabric(t *testing.T) {
	f := rnettest.NewFabric(nil)
	listen := func(network, addr string) (net.Listener, error) { return f.Listen(network, addr) }
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return f.DialContext(ctx, network, addr)
	}
	server := &transport{listen: listen}
	g, h := startServer(t, server, "127.0.0.1", http.HandlerFunc(dataHandler))
	results, err := runAll(t, &transport{dial: dial}, g, h, "", "")
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, results, "rdma")
}

// corruptingHandler serves the right body with one byte changed.
func corruptingHandler(at int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dataHandler(&corruptWriter{ResponseWriter: w, at: at}, r)
	})
}

type corruptWriter struct {
	http.ResponseWriter
	at, seen int
}

func (w *corruptWriter) Write(b []byte) (int, error) {
	if i := w.at - w.seen; i >= 0 && i < len(b) {
		b = append([]byte(nil), b...)
		b[i] ^= 0x40
	}
	w.seen += len(b)
	return w.ResponseWriter.Write(b)
}

// TestCorruptBodyFails: a response with one wrong byte, the last of a
// 64 KiB body, fails the workload, over HTTP/1.1 and HTTP/2.
func TestCorruptBodyFails(t *testing.T) {
	for _, proto := range []string{"http1", "http2"} {
		t.Run(proto, func(t *testing.T) {
			server := &transport{tcp: true}
			g, h := startServer(t, server, "127.0.0.1", corruptingHandler(64<<10-1))
			_, err := runAll(t, &transport{tcp: true}, g, h, "^"+proto+"/65536/", "")
			if err == nil || !strings.Contains(err.Error(), "body byte 65535 of 65536") {
				t.Fatalf("a corrupt body: %v, want the wrong byte named", err)
			}
			// The server still runs (the client stopped before asking it
			// to): stop it for the cleanup.
			cl, err := newClient(&transport{tcp: true}, g, h, "")
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if err := cl.stopServer(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCheckPattern(t *testing.T) {
	b := make([]byte, 1000)
	fillPattern(b, 7)
	if err := checkPattern(b, 7, len(b)); err != nil {
		t.Fatal(err)
	}
	if checkPattern(b, 8, len(b)) == nil {
		t.Error("another seed's pattern passed")
	}
	if checkPattern(b[:999], 7, len(b)) == nil {
		t.Error("a short body passed")
	}
	moved := append(append([]byte(nil), b[1:]...), b[0])
	if checkPattern(moved, 7, len(b)) == nil {
		t.Error("a body shifted by one byte passed")
	}
}

// TestPerCallIsDelta: work per call is the difference of the snapshots over
// the calls, with an rnet connection opened between them counted from zero.
func TestPerCallIsDelta(t *testing.T) {
	all := func(n uint64) *uint64 { return &n }
	before := counters{Wakeups: 100, ContextSwitches: 10, Syscalls: 1000, SyscallsAll: all(5000),
		SyscallsByName: map[string]uint64{"futex": 10}, RNet: map[string]uint64{"CQPolls": 50}}
	after := counters{Wakeups: 140, ContextSwitches: 30, Syscalls: 1100, SyscallsAll: all(5400),
		SyscallsByName: map[string]uint64{"futex": 30, "ioctl": 4}, RNet: map[string]uint64{"CQPolls": 90, "Parks": 8}}
	w := perCall(before, after, 4)
	want := perfjson.Work{Wakeups: 10, ContextSwitches: 5, Syscalls: 25, SyscallsAll: new(float64),
		SyscallsByName: map[string]float64{"futex": 5, "ioctl": 1}, RNet: map[string]float64{"CQPolls": 10, "Parks": 2}}
	*want.SyscallsAll = 100
	if !reflect.DeepEqual(w, want) {
		t.Errorf("perCall = %+v (all %v), want %+v (all %v)", w, *w.SyscallsAll, want, *want.SyscallsAll)
	}
	if w := perCall(counters{}, counters{}, 1); w.SyscallsAll != nil || w.SyscallsByName != nil || w.RNet != nil {
		t.Errorf("perCall without perf or rnet = %+v, want neither", w)
	}
}

// TestStatsSumsEveryCounter: every uint64 field of rnet.Stats is summed,
// under its name, so a counter added to rnet.Stats is reported unasked.
func TestStatsSumsEveryCounter(t *testing.T) {
	total := map[string]uint64{}
	var st rnet.Stats
	v := reflect.ValueOf(&st).Elem()
	var want []string
	for i := range v.NumField() {
		if v.Field(i).Kind() == reflect.Uint64 {
			v.Field(i).SetUint(uint64(i + 1))
			want = append(want, v.Type().Field(i).Name)
		}
	}
	addStats(total, st)
	addStats(total, st)
	if len(total) != len(want) {
		t.Errorf("summed %d counters, rnet.Stats has %d: %v", len(total), len(want), total)
	}
	for _, name := range want {
		f, _ := v.Type().FieldByName(name)
		if got := total[name]; got != 2*uint64(f.Index[0]+1) {
			t.Errorf("%s summed to %d, want %d", name, got, 2*(f.Index[0]+1))
		}
	}
	for _, name := range []string{"CQPolls", "Spins", "Parks", "SendCompletions", "RecvCompletions", "MessagesSent", "CreditUpdatesSent"} {
		if _, ok := total[name]; !ok {
			t.Errorf("no %s in the sum", name)
		}
	}
}
