package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rnet-dev/rnet/internal/bytesize"
	"github.com/rnet-dev/rnet/internal/perfjson"
)

// Application figures are kept in Extra, one Series per transport (RNet or
// TCP), workload, size and figure, with kinds "app:WORKLOAD:FIGURE":
// WORKLOAD is appbench's workload and its callers ("grpc-unary-c32"),
// FIGURE one of appFigures or SIDE/WORK, where SIDE is client or server and
// WORK wakeups, context-switches, syscalls, syscalls-all, syscall/NAME (one
// system call by name) or rnet/FIELD, a counter of rnet.Stats.
const appKindPrefix = "app:"

// Application figures of a workload.
const (
	AppP50  = "p50"     // µs
	AppP99  = "p99"     // µs
	AppRate = "calls/s" // calls, messages or requests per second
	AppMBps = "MB/s"    // payload one way
)

// Work per call of one side (the suffixes of SIDE/WORK).
const (
	WorkWakeups     = "wakeups"
	WorkSwitches    = "context-switches"
	WorkSyscalls    = "syscalls"
	WorkSyscallsAll = "syscalls-all"
	workRNetPrefix  = "rnet/"
	workCallPrefix  = "syscall/" // one system call by name, counted by perf
)

// appKind is the kind of a figure of the workload wl.
func appKind(wl, figure string) string { return appKindPrefix + wl + ":" + figure }

// parseAppKind splits an application kind; ok is false for any other kind.
func parseAppKind(kind string) (wl, figure string, ok bool) {
	rest, ok := strings.CutPrefix(kind, appKindPrefix)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, ":")
}

// appWorkload names a result's workload with its callers.
func appWorkload(r perfjson.AppResult) string {
	return r.Workload + "-c" + strconv.Itoa(r.Concurrency)
}

// appFigures returns one result's figures by kind.
func appFigures(r perfjson.AppResult) map[string]float64 {
	wl := appWorkload(r)
	vals := map[string]float64{appKind(wl, AppRate): r.CallsPerSec}
	if r.Workload == "grpc-stream" {
		vals[appKind(wl, AppMBps)] = r.MBps
	} else {
		vals[appKind(wl, AppP50)], vals[appKind(wl, AppP99)] = r.P50Us, r.P99Us
	}
	for side, w := range map[string]perfjson.Work{"client": r.Client, "server": r.Server} {
		vals[appKind(wl, side+"/"+WorkWakeups)] = w.Wakeups
		vals[appKind(wl, side+"/"+WorkSwitches)] = w.ContextSwitches
		vals[appKind(wl, side+"/"+WorkSyscalls)] = w.Syscalls
		if w.SyscallsAll != nil {
			vals[appKind(wl, side+"/"+WorkSyscallsAll)] = *w.SyscallsAll
		}
		for k, v := range w.SyscallsByName {
			vals[appKind(wl, side+"/"+workCallPrefix+k)] = v
		}
		for k, v := range w.RNet {
			vals[appKind(wl, side+"/"+workRNetPrefix+k)] = v
		}
	}
	return vals
}

// parseApps reads appbench -c's output: one JSON line per workload.
func parseApps(out string) ([]perfjson.AppResult, error) {
	var list []perfjson.AppResult
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r perfjson.AppResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("appbench output %q: %w", line, err)
		}
		if r.Test != "app" || r.Calls <= 0 || !(r.CallsPerSec > 0) || math.IsInf(r.CallsPerSec, 0) {
			return nil, fmt.Errorf("appbench output %q: no calls", line)
		}
		list = append(list, r)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("appbench printed no result: %q", out)
	}
	return list, nil
}

// runApps runs an appbench server on c.server:port (gRPC; HTTP on port+1)
// and its client from c.client, over rnet or TCP, and returns the
// client's results.
func runApps(ctx context.Context, c *config, port int, tcp bool) ([]perfjson.AppResult, error) {
	addr := c.server + ":" + strconv.Itoa(port)
	sargs := []string{c.appbench, "-s", addr}
	cargs := []string{c.appbench, "-c", addr, "-from", c.client, "-scale", strconv.FormatFloat(c.scale, 'g', -1, 64)}
	if c.appbenchRun != "" {
		cargs = append(cargs, "-run", c.appbenchRun)
	}
	if c.perf != "" {
		sargs, cargs = append(sargs, "-perf", c.perf), append(cargs, "-perf", c.perf)
	}
	if tcp {
		sargs, cargs = append(sargs, "-tcp"), append(cargs, "-tcp")
	}
	var out string
	err := serveWhile(ctx, c, "listening on", nil, sargs, func(*proc) (err error) {
		out, err = runClient(ctx, c, nil, cargs...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return parseApps(out)
}

// appsFailed is the kind counting the failed runs of appbench as a whole.
var appsFailed = appKind("all", AppRate)

// measureApps runs appbench once over transport and adds its figures to r's
// Extra series (through series, which finds or makes one).
func measureApps(r *Report, c *config, port int, transport string, series func(*[]*Series, string, string, int) *Series) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	results, err := runApps(ctx, c, port, transport == TCP)
	if err != nil {
		series(&r.Extra, transport, appsFailed, 0).Failures++
		fmt.Fprintf(os.Stderr, "   %-13s apps: FAILED: %v\n", transport, err)
		return
	}
	for _, res := range results {
		vals := appFigures(res)
		for _, k := range slices.Sorted(maps.Keys(vals)) {
			s := series(&r.Extra, transport, k, res.Size)
			s.Runs = append(s.Runs, vals[k])
		}
		fmt.Fprintf(os.Stderr, "   %-13s %-16s %5s: %s calls/s, p50 %s µs; per call client %s wakeups %s syscalls, server %s wakeups %s syscalls\n",
			transport, appWorkload(res), bytesize.Short(int64(res.Size)), fmtVal(res.CallsPerSec), fmtVal(res.P50Us),
			fmtVal(res.Client.Wakeups), fmtVal(res.Client.Syscalls), fmtVal(res.Server.Wakeups), fmtVal(res.Server.Syscalls))
	}
	fmt.Fprintf(os.Stderr, "   %-13s apps: %.1f s\n", transport, time.Since(start).Seconds())
}
