package main

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/rnet-dev/rnet/internal/perfjson"
	"github.com/rnet-dev/rnet/rnet"
)

// counters are a process's running totals; a workload's work is the
// difference between two snapshots.
type counters struct {
	Wakeups         uint64            `json:"wakeups"`
	ContextSwitches uint64            `json:"context_switches"`
	CPUMicros       uint64            `json:"cpu_us"`
	Syscalls        uint64            `json:"syscalls"`
	SyscallsAll     *uint64           `json:"syscalls_all,omitempty"` // nil when perf is not counting
	SyscallsByName  map[string]uint64 `json:"syscalls_by_name,omitempty"`
	RNet            map[string]uint64 `json:"rnet,omitempty"`
}

// schedSamplingPeriod: the runtime times one in this many of a goroutine's
// moves from runnable to running for /sched/latencies:seconds (its
// gTrackingPeriod), so the histogram's count times this estimates them all.
const schedSamplingPeriod = 8

// snapshot reads this process's totals now; conns are its rnet connections.
func snapshot(conns *connSet) (counters, error) {
	var c counters
	sample := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return c, fmt.Errorf("runtime/metrics: no %s", sample[0].Name)
	}
	for _, n := range sample[0].Value.Float64Histogram().Counts {
		c.Wakeups += n * schedSamplingPeriod
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return c, fmt.Errorf("getrusage: %w", err)
	}
	c.ContextSwitches = uint64(ru.Nvcsw + ru.Nivcsw)
	c.CPUMicros = uint64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
	n, err := readProcIO("/proc/self/io")
	if err != nil {
		return c, err
	}
	c.Syscalls = n
	c.RNet = conns.sum()
	return c, nil
}

// beginWork starts counting every system call (sc) and snapshots the
// counters, whose count of every system call is then zero. The snapshots
// are inside the count's window, so that every call they see it sees.
func beginWork(conns *connSet, sc *syscallCounter) (counters, error) {
	counting := sc.begin()
	c, err := snapshot(conns)
	if counting {
		c.SyscallsAll, c.SyscallsByName = new(uint64), map[string]uint64{}
	}
	return c, err
}

// endWork snapshots the counters and ends the count of every system call.
func endWork(conns *connSet, sc *syscallCounter) (counters, error) {
	c, err := snapshot(conns)
	if n := sc.end(); n != nil {
		c.SyscallsAll, c.SyscallsByName = &n.all, n.byName
	}
	return c, err
}

// readProcIO returns syscr + syscw of a /proc/PID/io file.
func readProcIO(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n uint64
	seen := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok || (k != "syscr" && k != "syscw") {
			continue
		}
		x, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		n += x
		seen++
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if seen != 2 {
		return 0, fmt.Errorf("%s: no syscr and syscw", path)
	}
	return n, nil
}

// perCall is the work between two snapshots divided by calls.
func perCall(before, after counters, calls int64) perfjson.Work {
	per := func(a, b uint64) float64 {
		if calls <= 0 || b < a {
			return 0
		}
		return float64(b-a) / float64(calls)
	}
	w := perfjson.Work{
		Wakeups:         per(before.Wakeups, after.Wakeups),
		ContextSwitches: per(before.ContextSwitches, after.ContextSwitches),
		CPUMicros:       per(before.CPUMicros, after.CPUMicros),
		Syscalls:        per(before.Syscalls, after.Syscalls),
	}
	if before.SyscallsAll != nil && after.SyscallsAll != nil {
		v := per(*before.SyscallsAll, *after.SyscallsAll)
		w.SyscallsAll = &v
		w.SyscallsByName = perName(before.SyscallsByName, after.SyscallsByName, per)
	}
	// A connection opened since the first snapshot counts from zero.
	w.RNet = perName(before.RNet, after.RNet, per)
	return w
}

// perName is per over the names of after; nil if it has none.
func perName(before, after map[string]uint64, per func(a, b uint64) float64) map[string]float64 {
	if len(after) == 0 {
		return nil
	}
	m := make(map[string]float64, len(after))
	for k, v := range after {
		m[k] = per(before[k], v)
	}
	return m
}

// connSet holds a process's rnet connections, closed ones included, so that
// their counters keep adding to the sum.
type connSet struct {
	mu    sync.Mutex
	conns []*rnet.Conn // guarded by mu
}

func (s *connSet) add(c *rnet.Conn) {
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
}

// sum adds up every uint64 field of rnet.Stats over the connections, by
// field name, so that a counter added to rnet.Stats shows without a change
// here; nil when there is no rnet connection.
func (s *connSet) sum() map[string]uint64 {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	conns := append([]*rnet.Conn(nil), s.conns...)
	s.mu.Unlock()
	if len(conns) == 0 {
		return nil
	}
	total := map[string]uint64{}
	for _, c := range conns {
		addStats(total, c.Stats())
	}
	return total
}

// addStats adds the uint64 fields of st to total.
func addStats(total map[string]uint64, st rnet.Stats) {
	v := reflect.ValueOf(st)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Uint64 {
			total[v.Type().Field(i).Name] += f.Uint()
		}
	}
}
