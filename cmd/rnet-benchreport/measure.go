package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rnet-dev/rnet/internal/bytesize"
	"github.com/rnet-dev/rnet/internal/stats"
)

var (
	throughputSizes = []int{64, 1 << 10, 4 << 10, 64 << 10, 1 << 20}
	latencySizes    = []int{64, 1 << 10, 4 << 10, 64 << 10}
)

// rnetConfigNote says how the rnet processes are configured, and sets it up:
// they read RNET_* from the environment (see cmd/rnet).
func rnetConfigNote(c *config) string {
	note := "rnet runs with its default Config (rsocket's defaults: 64 B inline, 10 µs busy polling)"
	if c.rnetBuffer > 0 {
		os.Setenv("RNET_BUFFER_SIZE", strconv.Itoa(c.rnetBuffer))
		note += fmt.Sprintf(" but %d-byte rings, the size rstream's rings get (it asks for 512 KiB SO_SNDBUF/SO_RCVBUF, which rsocket doubles)", c.rnetBuffer)
	} else {
		note += " and 128 KiB rings (rstream's are 1 MiB)"
	}
	if v := os.Getenv("RNET_BUSY_POLL"); v != "" {
		note += "; RNET_BUSY_POLL=" + v
	}
	return note
}

// pollForever is rnet-poll's BusyPoll: longer than any wait in a run.
const pollForever = "1m"

func measure(c *config) (*Report, error) {
	if _, err := exec.LookPath(c.rnet); err != nil {
		return nil, fmt.Errorf("the rnet command: %w (build it with go build ./cmd/rnet, pass -rnet)", err)
	}
	if c.rnetCounting != "" {
		if _, err := exec.LookPath(c.rnetCounting); err != nil {
			return nil, fmt.Errorf("the lock-counting rnet command: %w (build it with go build -tags rnet_lockcount ./cmd/rnet, pass -rnet-counting)", err)
		}
	}
	r := &Report{
		Date: time.Now().UTC().Format(time.RFC3339), Runs: c.runs, Server: c.server, Client: c.client,
		Devices:    c.cdev + " → " + c.sdev,
		Throughput: throughputSizes, Latency: latencySizes,
		Notes: []string{
			"throughput: MB/s = 10^6 bytes/s of payload; rnet and tcp from rnet perf (one way, until the server has counted every byte); rstream from its usec/xfer (-S size -C count -I 1, data goes one way then back); ib_write_bw's BW average (MiB/s) converted to MB/s",
			"latency: round trip of size bytes each way; rnet and tcp from rnet ping (-warmup 50); rstream's usec/xfer (-C 1 -I iters) is half a round trip, so doubled; ib_write_lat's t_avg and t_typical are half round trips, so doubled",
			rnetConfigNote(c),
			"rstream polls: its default loop retries rsend/rrecv with MSG_DONTWAIT and never sleeps; rnet-poll does the same (RNET_BUSY_POLL=" + pollForever + ": spin until the data comes). rstream-block is rstream -T b: blocking calls, where rsocket polls 10 µs and then sleeps on the completion channel, as rnet's default Config does. rnet/rstream-block and rnet-poll/rstream compare like with like",
			"tcp is Go's net package on the same addresses",
			"order: at each size the transports run one after another, each run starting with the next one",
		},
	}
	if c.gofloor != "" {
		r.Notes = append(r.Notes, fmt.Sprintf("floor: benchmarks/gofloor, no RDMA: two processes ping-pong through a shared page, both polling, each side working %d µs per message in one C call (as a post does); once per run, after the latency tests. Its Go/C ratio is the least the Go runtime adds to a polling round trip on these CPUs", floorWork))
	}
	if c.rnetCounting != "" {
		r.Notes = append(r.Notes, "work per round trip: rnet ping's crossings into C (cgo) in rnet-poll's timed tests; then, once per run after the latency tests, rnet-poll's latency test again with the client built with -tags rnet_lockcount (the server as before), for the client process's crossings and mutexes taken (locks) per round trip; the counting slows it, so no time is taken from it")
	}
	if len(c.serverExec) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("servers run on the server's host through %q (-server-exec), clients here; the control path's traffic during a measurement: the TCP segments this host sent and received from each RDMA client's start to its result line (rnet, rstream; ib_write exchanges its QPs over TCP), kept as %s", strings.Join(c.serverExec, " "), ControlSegments))
	}
	if c.appbench != "" {
		r.Notes = append(r.Notes, "applications: benchmarks/appbench, server and client processes on the same addresses, over rnet (its default Config, gRPC through rnetgrpc) and over TCP, alternating, once per run after the latency tests; gRPC unary echo (one ClientConn, 1 or 32 callers), gRPC server streaming, HTTP/1.1 and HTTP/2 (h2c) GETs with every body byte checked, 32 clients. Work per call: each process's count over the workload divided by its calls (messages for the stream, requests for HTTP): wakeups of goroutines (runtime/metrics /sched/latencies:seconds, sampled 1 in 8 and scaled), thread context switches (getrusage), read/write system calls (/proc/self/io), and rnet.Stats's counters summed over the process's connections")
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		r.Kernel = strings.TrimSpace(string(out))
	}
	// The clock source moves Go's figures more than C's: Go's scheduler
	// reads the clock several times per wakeup, and on the emulated HPET
	// every read is a system call (see BENCH_VM_APPEND in the Makefile).
	if b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource"); err == nil {
		r.Clock = strings.TrimSpace(string(b))
	}
	type test struct {
		transport string
		kind      string // Throughput or Latency
		run       measurer
	}
	// Two pairs compare like with like. rstream's default loop calls
	// rsend/rrecv with MSG_DONTWAIT and retries at once, so it never
	// sleeps: rnet-poll does the same (BusyPoll long enough to cover any
	// wait). rstream -T b makes blocking calls, where rsocket polls for its
	// polling_time (10 µs) and then sleeps on the completion channel: what
	// rnet does with its default Config.
	poll := "RNET_BUSY_POLL=" + pollForever
	bw := []test{
		{RNet, Throughput, rnetPerf(false)}, {RNetPoll, Throughput, rnetPerf(false, poll)},
		{RStream, Throughput, rstreamBW()}, {RStreamBlock, Throughput, rstreamBW("-T", "b")},
		{Verbs, Throughput, ibWriteBW}, {TCP, Throughput, rnetPerf(true)},
	}
	lat := []test{
		{RNet, Latency, rnetPing(false)}, {RNetPoll, Latency, rnetPing(false, poll)},
		{RStream, Latency, rstreamLat()}, {RStreamBlock, Latency, rstreamLat("-T", "b")},
		{Verbs, Latency, ibWriteLat}, {TCP, Latency, rnetPing(true)},
	}
	series := func(list *[]*Series, transport, kind string, size int) *Series {
		if s := r.find(*list, transport, kind, size); s != nil {
			return s
		}
		unit, stat := unitOf(kind)
		s := &Series{Transport: transport, Kind: kind, Size: size, Unit: unit, Statistic: stat}
		*list = append(*list, s)
		return s
	}
	// After the latency tests, their work per round trip with locks counted
	// (see rnetPingCounting); an empty list when no counting build is given.
	var counting []test
	if c.rnetCounting != "" {
		counting = []test{{RNetPollCounting, LocksPerTrip, rnetPingCounting(poll)}}
	}
	port := c.port
	for run := 1; run <= c.runs; run++ {
		fmt.Fprintf(os.Stderr, "== run %d of %d\n", run, c.runs)
		// Interleave the transports at each size, so that a slow patch of
		// the machine hurts them alike, and start each run with the next
		// one: a transport's place in the order (first, or right after a
		// given other) moves its figure (docs/performance.md), and a fixed
		// order would put that into every run's ratio.
		for _, group := range []struct {
			sizes []int
			tests []test
		}{{throughputSizes, bw}, {latencySizes, lat}, {latencySizes, counting}} {
			for _, size := range group.sizes {
				for _, t := range rotated(group.tests, run-1) {
					port++
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
					start := time.Now()
					c.clientTCPSegments = math.NaN()
					vals, err := t.run(ctx, c, port, size)
					cancel()
					if err == nil && len(c.serverExec) > 0 && controlled(t.transport) {
						vals[ControlSegments] = c.clientTCPSegments
					}
					for _, k := range []string{Throughput, Latency, LatencyP50} {
						v, ok := vals[k]
						if ok && err == nil && (math.IsNaN(v) || math.IsInf(v, 0) || v <= 0) {
							err = fmt.Errorf("implausible %s %v", k, v)
						}
					}
					if err != nil {
						failed := &r.Series
						if t.kind != Throughput && t.kind != Latency {
							failed = &r.Extra
						}
						series(failed, t.transport, t.kind, size).Failures++
						fmt.Fprintf(os.Stderr, "   %-13s %-10s %5s: FAILED: %v\n", t.transport, t.kind, bytesize.Short(int64(size)), err)
						continue
					}
					var parts []string
					for _, k := range slices.Concat([]string{Throughput, Latency, LatencyP50}, workKinds, tripKinds, []string{ControlSegments}) {
						v, ok := vals[k]
						if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
							continue // a work figure that could not be counted
						}
						list := &r.Series
						if k != Throughput && k != Latency {
							list = &r.Extra
						}
						s := series(list, t.transport, k, size)
						s.Runs = append(s.Runs, v)
						parts = append(parts, fmt.Sprintf("%s %s", k, fmtVal(v)))
					}
					fmt.Fprintf(os.Stderr, "   %-13s %5s: %s (%.1f s)\n", t.transport, bytesize.Short(int64(size)), strings.Join(parts, ", "), time.Since(start).Seconds())
				}
			}
		}
		if c.appbench != "" {
			// rnet and TCP alternate, each run starting with the next.
			for _, transport := range rotated([]string{RNet, TCP}, run-1) {
				port += 2 // gRPC and HTTP
				measureApps(r, c, port, transport, series)
			}
		}
		if c.gofloor != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			got, err := runFloor(ctx, c)
			cancel()
			if err != nil {
				series(&r.Extra, FloorGo, Latency, 0).Failures++
				fmt.Fprintf(os.Stderr, "   %-13s: FAILED: %v\n", "gofloor", err)
				continue
			}
			for _, name := range []string{FloorC, FloorGo} {
				for _, k := range []string{Latency, LatencyP50} {
					s := series(&r.Extra, name, k, 0)
					s.Runs = append(s.Runs, got[name][k])
				}
				fmt.Fprintf(os.Stderr, "   %-13s: latency %s µs, p50 %s µs\n", name, fmtVal(got[name][Latency]), fmtVal(got[name][LatencyP50]))
			}
		}
	}
	for _, s := range append(append([]*Series(nil), r.Series...), r.Extra...) {
		if len(s.Runs) > 0 {
			s.Median = stats.Median(s.Runs)
		}
	}
	return r, nil
}

// controlled reports whether a transport's client moves nothing over TCP, so
// that every TCP segment while it runs is the control path's (-server-exec):
// ib_write's tools exchange their QPs over TCP, and tcp is TCP.
func controlled(transport string) bool { return transport != Verbs && transport != TCP }

// rotated returns list starting at its k-th element (modulo its length),
// wrapping around.
func rotated[T any](list []T, k int) []T {
	if len(list) == 0 {
		return nil
	}
	k %= len(list)
	return append(append(make([]T, 0, len(list)), list[k:]...), list[:k]...)
}
