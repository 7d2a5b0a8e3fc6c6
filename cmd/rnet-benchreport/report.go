package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/rnet-dev/rnet/internal/bytesize"
)

// Transports, in the order of tables and legends.
const (
	RNet         = "rnet"          // default Config: spin briefly, then sleep
	RNetPoll     = "rnet-poll"     // BusyPoll without end, as rstream polls
	RStream      = "rstream"       // rstream's default: nonblocking calls in a loop
	RStreamBlock = "rstream-block" // rstream -T b: rsocket's blocking calls
	Verbs        = "ib_write"      // ib_write_bw / ib_write_lat: the device's own limit
	TCP          = "tcp"
)

var transportOrder = []string{RNet, RNetPoll, RStream, RStreamBlock, Verbs, TCP}

// RNetPollCounting is rnet-poll's latency test run once more with rnet built
// with the rnet_lockcount tag: only its work per round trip is kept (Extra),
// since the counting slows it.
const RNetPollCounting = "rnet-poll-lockcount"

// Floor variants of benchmarks/gofloor, as Extra series (size 0): a
// shared-memory ping-pong with no RDMA, in C and in Go.
const (
	FloorC  = "floor-c"      // the C twin
	FloorGo = "floor-go-cgo" // Go polling through cgo with one yield per wait, as rnet's reply wait
)

// Kinds of measurement.
const (
	Throughput = "throughput"  // MB/s (10^6 bytes/s), higher is better
	Latency    = "latency"     // mean round trip in µs, lower is better
	LatencyP50 = "latency-p50" // median round trip in µs (not every tool has it)

	// The client's work per message of a throughput test (kept in Extra):
	// read and write system calls (on rxe: doorbells, CQ arming, channel
	// reads), crossings into C, completions polled. rstream's messages are
	// those it sends and those it receives back.
	SyscallsPerMsg    = "syscalls-per-msg"
	CgoPerMsg         = "cgo-per-msg"
	CompletionsPerMsg = "completions-per-msg"
)

// workKinds are the per-message figures, in table order.
var workKinds = []string{SyscallsPerMsg, CgoPerMsg, CompletionsPerMsg}

// The client's work per round trip of a latency test (kept in Extra):
// crossings into C, from rnet ping over rdma, and mutexes taken, from a
// build that counts them (RNetPollCounting).
const (
	CgoPerTrip   = "cgo-per-round-trip"
	LocksPerTrip = "locks-per-round-trip"
)

// ControlSegments is, with -server-exec, the TCP segments in and out of the
// client's host from an RDMA test's client's start to its result line: the
// control path's traffic during the measurement, which should be none (kept
// in Extra).
const ControlSegments = "control-tcp-segments"

// tripKinds are the per-round-trip figures.
var tripKinds = []string{CgoPerTrip, LocksPerTrip}

// unitOf is the unit of a kind of figure and what one run's value of it is.
func unitOf(kind string) (unit, statistic string) {
	if _, figure, ok := parseAppKind(kind); ok {
		return appUnit(figure)
	}
	switch kind {
	case Throughput:
		return "MB/s", "one run's throughput"
	case Latency:
		return "µs", "one run's mean round trip"
	case LatencyP50:
		return "µs", "one run's median round trip"
	case CgoPerTrip, LocksPerTrip:
		return "per round trip", "one run's count over its round trips"
	case ControlSegments:
		return "segments", "TCP segments in and out of the client's host from one run's client's start to its result"
	}
	return "per message", "one run's count over its messages"
}

// workSizes are the sizes whose per-message figures the table shows: at
// larger ones a test moves too few messages for the process's setup not to
// count.
func workSize(size int) bool { return size <= 4<<10 }

// Series is one transport's measurement at one size, over every run.
type Series struct {
	Transport string    `json:"transport"`
	Kind      string    `json:"kind"`
	Size      int       `json:"size"`
	Unit      string    `json:"unit"`
	Statistic string    `json:"statistic"` // what each run's value is
	Runs      []float64 `json:"runs"`      // one value per successful run
	Failures  int       `json:"failures,omitempty"`
	Median    float64   `json:"median"` // of Runs; 0 when every run failed
}

// Report is bench.json.
type Report struct {
	Date       string    `json:"date"`
	Runs       int       `json:"runs"`
	Server     string    `json:"server"`
	Client     string    `json:"client"`
	Devices    string    `json:"devices"`
	Kernel     string    `json:"kernel,omitempty"`
	Clock      string    `json:"clocksource,omitempty"` // the kernel's clock source: tsc, hpet, ...
	Notes      []string  `json:"notes"`
	Series     []*Series `json:"series"`
	Extra      []*Series `json:"extra,omitempty"` // figures not plotted (rnet p50 latency, ...)
	Throughput []int     `json:"throughput_sizes"`
	Latency    []int     `json:"latency_sizes"`
}

func (r *Report) find(list []*Series, transport, kind string, size int) *Series {
	for _, s := range list {
		if s.Transport == transport && s.Kind == kind && s.Size == size {
			return s
		}
	}
	return nil
}

func (r *Report) get(transport, kind string, size int) float64 {
	if s := r.find(r.Series, transport, kind, size); s != nil && len(s.Runs) > 0 {
		return s.Median
	}
	return math.NaN()
}

// p50 is a transport's median round trip (a figure kept in Extra).
func (r *Report) p50(transport string, size int) float64 {
	if e := r.find(r.Extra, transport, LatencyP50, size); e != nil && len(e.Runs) > 0 {
		return e.Median
	}
	return math.NaN()
}

// extraMedian is the median of a size-less figure kept in Extra (the floor).
func (r *Report) extraMedian(transport, kind string) float64 {
	if e := r.find(r.Extra, transport, kind, 0); e != nil && len(e.Runs) > 0 {
		return e.Median
	}
	return math.NaN()
}

func fmtVal(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// table writes rows as right-aligned columns, two spaces apart.
func table(w io.Writer, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, row := range rows {
		fmt.Fprint(tw, strings.Join(row, "\t")+"\t\n")
	}
	tw.Flush()
}

// WriteTable prints the medians and rnet's ratios to each other transport.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "rnet benchmark report: medians of %d runs, server %s, client %s (%s)\n", r.Runs, r.Server, r.Client, r.Devices)
	if r.Kernel != "" || r.Clock != "" {
		fmt.Fprintf(w, "  kernel %s, clock source %s\n", r.Kernel, r.Clock)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	// Ratios: rnet/rstream as the targets are stated; rnet/rstr-b and
	// poll/rstream with both sides sleeping, and both polling. An empty
	// column sets the ratios apart.
	fmt.Fprintf(w, "\nThroughput, MB/s (higher is better)\n")
	rows := [][]string{{"size", RNet, RNetPoll, RStream, "rstream-b", Verbs + "_bw", TCP, "",
		"rnet/rstream", "rnet/rstr-b", "poll/rstream", "rnet/ib_bw", "rnet/tcp"}}
	for _, s := range r.Throughput {
		rn, rp, rs, rb := r.get(RNet, Throughput, s), r.get(RNetPoll, Throughput, s), r.get(RStream, Throughput, s), r.get(RStreamBlock, Throughput, s)
		ib, tc := r.get(Verbs, Throughput, s), r.get(TCP, Throughput, s)
		rows = append(rows, []string{bytesize.Short(int64(s)), fmtVal(rn), fmtVal(rp), fmtVal(rs), fmtVal(rb), fmtVal(ib), fmtVal(tc), "",
			ratio(rn, rs), ratio(rn, rb), ratio(rp, rs), ratio(rn, ib), ratio(rn, tc)})
	}
	table(w, rows)
	fmt.Fprintf(w, "\nRound-trip latency, µs (lower is better; ratios to rstream compare means, rnet/ib_lat and rnet/tcp medians)\n")
	rows = [][]string{{"size", "rnet-mean", "rnet-p50", "poll-mean", "rstr-mean", "rstrb-mean", "ib-p50", "tcp-p50", "",
		"rnet/rstream", "rnet/rstr-b", "poll/rstream", "rnet/ib_lat", "rnet/tcp"}}
	for _, s := range r.Latency {
		rn, rp, rs, rb := r.get(RNet, Latency, s), r.get(RNetPoll, Latency, s), r.get(RStream, Latency, s), r.get(RStreamBlock, Latency, s)
		p50, ib, tc := r.p50(RNet, s), r.p50(Verbs, s), r.p50(TCP, s)
		rows = append(rows, []string{bytesize.Short(int64(s)), fmtVal(rn), fmtVal(p50), fmtVal(rp), fmtVal(rs), fmtVal(rb), fmtVal(ib), fmtVal(tc), "",
			ratio(rn, rs), ratio(rn, rb), ratio(rp, rs), ratio(p50, ib), ratio(p50, tc)})
	}
	table(w, rows)
	r.writeWork(w)
	if fc, fg := r.extraMedian(FloorC, Latency), r.extraMedian(FloorGo, Latency); !math.IsNaN(fc) || !math.IsNaN(fg) {
		fmt.Fprintf(w, "\nGo runtime floor, no RDMA (benchmarks/gofloor; round trip, µs)\n")
		fc50, fg50 := r.extraMedian(FloorC, LatencyP50), r.extraMedian(FloorGo, LatencyP50)
		table(w, [][]string{
			{"c-mean", "c-p50", "go-mean", "go-p50", "", "go/c mean", "go/c p50"},
			{fmtVal(fc), fmtVal(fc50), fmtVal(fg), fmtVal(fg50), "", ratio(fg, fc), ratio(fg50, fc50)},
		})
	}
	r.writeTripWork(w)
	r.writeControl(w)
	r.writeApps(w)
	r.writeAppWork(w)
	var fails []string
	for _, s := range append(append([]*Series(nil), r.Series...), r.Extra...) {
		if s.Failures > 0 {
			what := s.Transport + " " + s.Kind
			if s.Size > 0 {
				what += " " + bytesize.Short(int64(s.Size))
			}
			fails = append(fails, fmt.Sprintf("%s: %d of %d runs failed", what, s.Failures, s.Failures+len(s.Runs)))
		}
	}
	if len(fails) > 0 {
		fmt.Fprintf(w, "\nfailures (medians are over the runs that worked): %s\n", strings.Join(fails, "; "))
	}
}

// writeWork prints the client's work per message of the throughput tests,
// if the report has it.
func (r *Report) writeWork(w io.Writer) {
	transports := []string{RNet, RNetPoll, RStream, RStreamBlock}
	var sizes []int
	for _, s := range r.Throughput {
		if workSize(s) && !math.IsNaN(r.work(RNet, SyscallsPerMsg, s)) {
			sizes = append(sizes, s)
		}
	}
	if len(sizes) == 0 {
		return
	}
	fmt.Fprintf(w, "\nClient work per message, throughput tests (syscalls: read/write system calls, on rxe doorbells and channel reads; cgo: crossings into C; wc: completions)\n")
	rows := [][]string{{"size"}}
	for _, t := range transports {
		rows[0] = append(rows[0], t+" syscalls/cgo/wc")
	}
	for _, s := range sizes {
		row := []string{bytesize.Short(int64(s))}
		for _, t := range transports {
			var parts []string
			for _, k := range workKinds {
				parts = append(parts, fmtVal(r.work(t, k, s)))
			}
			row = append(row, strings.Join(parts, " / "))
		}
		rows = append(rows, row)
	}
	table(w, rows)
}

// work is a transport's median of a per-message figure (kept in Extra).
func (r *Report) work(transport, kind string, size int) float64 {
	if e := r.find(r.Extra, transport, kind, size); e != nil && len(e.Runs) > 0 {
		return e.Median
	}
	return math.NaN()
}

// writeTripWork prints rnet-poll's client work per round trip of the latency
// tests, if the report has it: crossings into C from the timed runs, and
// crossings and locks from the runs of the counting build, whose ratio is
// the locks per crossing.
func (r *Report) writeTripWork(w io.Writer) {
	var rows [][]string
	for _, s := range r.Latency {
		cgo := r.work(RNetPoll, CgoPerTrip, s)
		countingCgo, locks := r.work(RNetPollCounting, CgoPerTrip, s), r.work(RNetPollCounting, LocksPerTrip, s)
		if math.IsNaN(cgo) && math.IsNaN(countingCgo) && math.IsNaN(locks) {
			continue
		}
		perCgo := math.NaN()
		if countingCgo > 0 {
			perCgo = locks / countingCgo
		}
		rows = append(rows, []string{bytesize.Short(int64(s)), fmtVal(cgo), "", fmtVal(countingCgo), fmtVal(locks), fmtVal(perCgo)})
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nClient work per round trip, latency tests (rnet-poll; cgo: crossings into C in the timed runs; counting-cgo and locks: crossings and mutexes taken in the same test built with -tags rnet_lockcount, whose times are not used)\n")
	table(w, append([][]string{{"size", "cgo", "", "counting-cgo", "locks", "locks/cgo"}}, rows...))
}

// writeControl sums up the control path's traffic during the RDMA tests
// (ControlSegments), if the report has it.
func (r *Report) writeControl(w io.Writer) {
	var tests, quiet int
	var total, most float64
	for _, e := range r.Extra {
		if e.Kind != ControlSegments {
			continue
		}
		for _, v := range e.Runs {
			tests++
			total += v
			most = max(most, v)
			if v == 0 {
				quiet++
			}
		}
	}
	if tests == 0 {
		return
	}
	fmt.Fprintf(w, "\nControl path (-server-exec) during the RDMA measurements: %d of %d client runs saw no TCP segment on the client's host before their result; %.0f segments in all, at most %.0f in one run\n",
		quiet, tests, total, most)
}
