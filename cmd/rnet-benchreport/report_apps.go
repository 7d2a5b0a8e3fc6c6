package main

import (
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/rnet-dev/rnet/internal/bytesize"
	"github.com/rnet-dev/rnet/rnet"
)

// appUnit is the unit of an application figure and what one run's value
// of it is.
func appUnit(figure string) (unit, statistic string) {
	switch figure {
	case AppP50:
		return "µs", "one run's median call"
	case AppP99:
		return "µs", "one run's 99th percentile call"
	case AppRate:
		return "calls/s", "one run's calls (messages, requests) per second"
	case AppMBps:
		return "MB/s", "one run's payload per second"
	}
	return "per call", "one process's count over one run's calls, divided by them"
}

// appRow is one workload at one size, in the order the report has them.
type appRow struct {
	workload string
	size     int
}

// appRows lists the workloads and sizes of the application figures, in the
// order they were measured.
func (r *Report) appRows() []appRow {
	var rows []appRow
	seen := map[appRow]bool{}
	for _, s := range r.Extra {
		wl, _, ok := parseAppKind(s.Kind)
		if row := (appRow{wl, s.Size}); ok && s.Kind != appsFailed && !seen[row] {
			seen[row] = true
			rows = append(rows, row)
		}
	}
	return rows
}

// app is a transport's median of an application figure.
func (r *Report) app(transport string, row appRow, figure string) float64 {
	return r.work(transport, appKind(row.workload, figure), row.size)
}

// writeApps prints the application figures of rnet and TCP and their ratio.
func (r *Report) writeApps(w io.Writer) {
	rows := r.appRows()
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nApplications (benchmarks/appbench; -cN: N concurrent callers; p50/p99: µs per call, lower is better; calls/s and MB/s: higher is better)\n")
	table := [][]string{{"workload", "size", "figure", RNet, TCP, "rnet/tcp"}}
	for _, row := range rows {
		for _, fig := range []string{AppP50, AppP99, AppRate, AppMBps} {
			rn, tc := r.app(RNet, row, fig), r.app(TCP, row, fig)
			if math.IsNaN(rn) && math.IsNaN(tc) {
				continue
			}
			table = append(table, []string{row.workload, bytesize.Short(int64(row.size)), fig, fmtVal(rn), fmtVal(tc), ratio(rn, tc)})
		}
	}
	writeLeft(w, table)
}

// workFigures are the work figures every transport has, in table order.
var workFigures = []string{WorkWakeups, WorkSwitches, WorkSyscalls, WorkSyscallsAll}

// rnetCounters are the counters of rnet.Stats, in its order: a counter
// added to it shows in the table without a change here.
func rnetCounters() []string {
	var names []string
	t := reflect.TypeFor[rnet.Stats]()
	for i := range t.NumField() {
		if t.Field(i).Type.Kind() == reflect.Uint64 {
			names = append(names, t.Field(i).Name)
		}
	}
	return names
}

// writeAppWork prints each process's work per call, rnet beside TCP: the
// rnet counters that are not zero on either side.
func (r *Report) writeAppWork(w io.Writer) {
	rows := r.appRows()
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nWork per call, applications (medians; per unary call, streamed message or HTTP request; wakeups: goroutines made to run; context-switches: OS threads'; syscalls: read/write system calls; syscalls-all: every system call (perf); syscall/X: system call X (perf); rnet/X: rnet.Stats's X over the process's connections)\n")
	table := [][]string{{"workload", "size", "figure", "rnet-client", "tcp-client", "rnet-server", "tcp-server"}}
	calls := r.syscallNames()
	for _, row := range rows {
		figures := slices.Clone(workFigures)
		for _, name := range calls {
			figures = append(figures, workCallPrefix+name)
		}
		for _, f := range rnetCounters() {
			figures = append(figures, workRNetPrefix+f)
		}
		for _, f := range figures {
			vals := []float64{r.app(RNet, row, "client/"+f), r.app(TCP, row, "client/"+f), r.app(RNet, row, "server/"+f), r.app(TCP, row, "server/"+f)}
			if !anyShown(vals, !slices.Contains(workFigures, f)) {
				continue
			}
			line := []string{row.workload, bytesize.Short(int64(row.size)), f}
			for _, v := range vals {
				line = append(line, fmtVal(v))
			}
			table = append(table, line)
		}
	}
	writeLeft(w, table)
}

// syscallNames are the system calls perf counted by name, sorted.
func (r *Report) syscallNames() []string {
	var names []string
	for _, s := range r.Extra {
		_, figure, ok := parseAppKind(s.Kind)
		if !ok {
			continue
		}
		_, work, _ := strings.Cut(figure, "/")
		if name, ok := strings.CutPrefix(work, workCallPrefix); ok && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// anyShown reports whether a row of values is worth a line: one is known,
// and, with skipZero (rnet's counters, system calls by name), not zero.
func anyShown(vals []float64, skipZero bool) bool {
	for _, v := range vals {
		if !math.IsNaN(v) && (!skipZero || v != 0) {
			return true
		}
	}
	return false
}

// writeLeft is table with its first three columns (names) on the left.
func writeLeft(w io.Writer, rows [][]string) {
	// tabwriter aligns every column alike; pad the names by hand instead.
	width := make([]int, 3)
	for _, row := range rows {
		for i := range width {
			width[i] = max(width[i], len(row[i]))
		}
	}
	out := make([][]string, len(rows))
	for k, row := range rows {
		name := fmt.Sprintf("%-*s  %*s  %-*s", width[0], row[0], width[1], row[1], width[2], row[2])
		out[k] = append([]string{name}, row[3:]...)
	}
	table(w, out)
}
