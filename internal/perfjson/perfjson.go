// Package perfjson is the schema of the rnet command's --json results for
// perf and ping: the command prints these types and rnet-benchreport reads
// them, so a field added to one is known to the other. Keys are snake_case,
// with the unit in the name (mb_per_s is 10^6 bytes per second).
package perfjson

import "github.com/rnet-dev/rnet/rnet"

// PerfResult is the summary of `rnet perf -c`, and its --json form. With
// -P its figures are the sum of the streams', each also in Streams.
type PerfResult struct {
	Test        string         `json:"test"` // "perf"
	Transport   string         `json:"transport"`
	Fallback    string         `json:"fallback,omitempty"` // why TCP, when it fell back from RDMA
	Server      string         `json:"server"`
	Local       string         `json:"local"`
	Reverse     bool           `json:"reverse,omitempty"`  // -R: the server sent
	Parallel    int            `json:"parallel,omitempty"` // -P, when more than one stream
	Size        int            `json:"size"`
	Writes      int64          `json:"writes,omitempty"`
	Reads       int64          `json:"reads,omitempty"` // -R: the client's Read calls
	Bytes       int64          `json:"bytes"`
	Seconds     float64        `json:"seconds"`
	MBps        float64        `json:"mb_per_s"`   // 10^6 bytes per second
	Gbps        float64        `json:"gbit_per_s"` // 10^9 bits per second
	CgoPerWrite float64        `json:"cgo_per_write,omitempty"`
	CgoPerRead  float64        `json:"cgo_per_read,omitempty"`
	Stats       *rnet.Stats    `json:"stats,omitempty"` // one stream's; with -P in Streams
	Streams     []StreamResult `json:"streams,omitempty"`
	Intervals   []Interval     `json:"intervals"`
}

// StreamResult is one stream of a -P test.
type StreamResult struct {
	Stream  int         `json:"stream"` // from 1
	Local   string      `json:"local"`
	Bytes   int64       `json:"bytes"`
	Seconds float64     `json:"seconds"`
	MBps    float64     `json:"mb_per_s"`
	Stats   *rnet.Stats `json:"stats,omitempty"`
}

// Interval is what moved in one -i interval (the last one is shorter), in
// all and, with -P, per stream.
type Interval struct {
	Start   float64          `json:"start"` // seconds since the test started
	End     float64          `json:"end"`
	Bytes   int64            `json:"bytes"`
	MBps    float64          `json:"mb_per_s"`
	Streams []StreamInterval `json:"streams,omitempty"`
}

// StreamInterval is one stream's part of an Interval.
type StreamInterval struct {
	Stream int     `json:"stream"`
	Bytes  int64   `json:"bytes"`
	MBps   float64 `json:"mb_per_s"`
}

// SweepResult is `rnet perf -c -a --json`: one test per size.
type SweepResult struct {
	Test     string       `json:"test"` // "perf-sweep"
	Reverse  bool         `json:"reverse,omitempty"`
	Parallel int          `json:"parallel"`
	Results  []PerfResult `json:"results"`
}

// PingResult is the summary of `rnet ping`; times are round trips in µs.
type PingResult struct {
	Test      string  `json:"test"` // "ping"
	Transport string  `json:"transport"`
	Fallback  string  `json:"fallback,omitempty"` // why TCP, when it fell back from RDMA
	Server    string  `json:"server"`
	Local     string  `json:"local"`
	Size      int     `json:"size"`
	Count     int     `json:"count"`
	MinUs     float64 `json:"min_us"`
	P50Us     float64 `json:"p50_us"`
	P90Us     float64 `json:"p90_us"`
	P99Us     float64 `json:"p99_us"`
	MaxUs     float64 `json:"max_us"`
	MeanUs    float64 `json:"mean_us"`
	// The rest is measured on rdma only, and absent over TCP; over rdma a
	// zero is reported, since no parks at all is worth knowing.
	CgoPerTrip *float64 `json:"cgo_per_round_trip,omitempty"`
	// Client-side waits per round trip: spins, and parks (each a wakeup
	// through the netpoller, which costs far more than a spin under
	// emulation).
	SpinsPerTrip *float64 `json:"spins_per_round_trip,omitempty"`
	ParksPerTrip *float64 `json:"parks_per_round_trip,omitempty"`
	// The mutexes the client's process took per round trip (package
	// internal/lockcount), over any transport; present only in a build with
	// the rnet_lockcount tag, whose counting makes its times no measure.
	LocksPerTrip *float64 `json:"locks_per_round_trip,omitempty"`
}

// AppResult is one workload of benchmarks/appbench's client, one JSON line:
// a gRPC or HTTP workload over rnet or TCP, with both processes' work per
// call (a call is a unary call, a streamed message or an HTTP request).
type AppResult struct {
	Test        string  `json:"test"`      // "app"
	Transport   string  `json:"transport"` // "rdma" or "tcp"
	Workload    string  `json:"workload"`  // grpc-unary, grpc-stream, http1, http2
	Size        int     `json:"size"`      // bytes of each message or response body
	Concurrency int     `json:"concurrency"`
	Calls       int64   `json:"calls"`
	Seconds     float64 `json:"seconds"`
	CallsPerSec float64 `json:"calls_per_s"`
	MBps        float64 `json:"MBps"` // 10^6 bytes/s of payload, one way
	// Latencies of single calls; absent for a stream, whose messages are
	// not answered one by one.
	P50Us  float64 `json:"p50_us,omitempty"`
	P99Us  float64 `json:"p99_us,omitempty"`
	Client Work    `json:"client"`
	Server Work    `json:"server"`
}

// Work is what one process did over a workload, divided by its calls.
type Work struct {
	// Wakeups are the goroutines made to run (runtime/metrics
	// /sched/latencies:seconds counts each move from runnable to running).
	Wakeups float64 `json:"wakeups"`
	// ContextSwitches are the OS threads' switches, voluntary and not
	// (getrusage RUSAGE_SELF ru_nvcsw + ru_nivcsw).
	ContextSwitches float64 `json:"context_switches"`
	// CPUMicros is the CPU time the process took, user and system, in µs
	// (getrusage RUSAGE_SELF ru_utime + ru_stime).
	CPUMicros float64 `json:"cpu_us"`
	// Syscalls are the read and write system calls of /proc/self/io
	// (syscr + syscw): reads and writes of sockets, of the device's
	// doorbells and of completion channels, but not epoll or futex calls.
	Syscalls float64 `json:"syscalls"`
	// SyscallsAll counts every system call (perf's raw_syscalls:sys_enter
	// tracepoint), when perf could be attached to the process.
	SyscallsAll *float64 `json:"syscalls_all,omitempty"`
	// SyscallsByName counts some system calls one by one (futex,
	// epoll_pwait, nanosleep, ioctl, ...), by name, beside SyscallsAll.
	SyscallsByName map[string]float64 `json:"syscalls_by_name,omitempty"`
	// RNet is every counter of rnet.Stats summed over the process's rnet
	// connections, by field name; absent over TCP.
	RNet map[string]float64 `json:"rnet,omitempty"`
}
