package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rnet-dev/rnet/internal/bytesize"
	"github.com/rnet-dev/rnet/internal/perfjson"
	"github.com/rnet-dev/rnet/rnet"
)

func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

func direction(reverse bool) string {
	if reverse {
		return "<-"
	}
	return "->"
}

func printPerf(w io.Writer, asJSON bool, r perfjson.PerfResult) error {
	if asJSON {
		return writeJSON(w, r)
	}
	for _, s := range r.Streams {
		fmt.Fprintf(w, "[%3d] %s %s %s: %s in %.2f s = %.1f MB/s\n", s.Stream, s.Local, direction(r.Reverse), r.Server, bytesize.Format(uint64(s.Bytes)), s.Seconds, s.MBps)
	}
	calls, what := r.Writes, "writes"
	if r.Reverse {
		calls, what = r.Reads, "reads"
	}
	prefix := ""
	if r.Parallel > 1 {
		prefix = fmt.Sprintf("[SUM] %d streams, ", r.Parallel)
	}
	fmt.Fprintf(w, "%s%s %s %s %s: %d %s of %d B, %s in %.2f s = %.1f MB/s (%.3f Gb/s)",
		prefix, withFallback(r.Transport, r.Fallback), r.Local, direction(r.Reverse), r.Server, calls, what, r.Size, bytesize.Format(uint64(r.Bytes)), r.Seconds, r.MBps, r.Gbps)
	if r.CgoPerWrite > 0 {
		fmt.Fprintf(w, ", %.2f cgo calls/write", r.CgoPerWrite)
	}
	if r.CgoPerRead > 0 {
		fmt.Fprintf(w, ", %.2f cgo calls/read", r.CgoPerRead)
	}
	if r.Stats != nil {
		fmt.Fprintf(w, "; waits: %d spun, %d parked", r.Stats.Spins, r.Stats.Parks)
	}
	fmt.Fprintln(w)
	return nil
}

func printSweepHeader(w io.Writer, o perfOpts) {
	what := fmt.Sprintf("for %v", o.duration)
	if o.bytes > 0 {
		what = bytesize.Format(uint64(o.bytes))
	}
	fmt.Fprintf(w, "sweep %s %s, %d stream(s), %s per size\n", direction(o.reverse), o.addr, o.parallel, what)
	fmt.Fprintf(w, "%10s %12s %12s %10s %12s %12s\n", "size", "calls", "bytes", "seconds", "MB/s", "Gb/s")
}

func printSweepLine(w io.Writer, r perfjson.PerfResult) {
	fmt.Fprintf(w, "%10d %12d %12d %10.3f %12.2f %12.4f\n", r.Size, r.Writes+r.Reads, r.Bytes, r.Seconds, r.MBps, r.Gbps)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ServerResult is what the server prints per test: per client connection,
// or for a -P test one result whose Streams are its connections'.
type ServerResult struct {
	Test      string  `json:"test"`
	Transport string  `json:"transport"`
	Fallback  string  `json:"fallback,omitempty"`
	Client    string  `json:"client"`
	Reverse   bool    `json:"reverse,omitempty"`  // the server sent
	Parallel  int     `json:"parallel,omitempty"` // streams of a -P test
	Size      int     `json:"size"`
	Bytes     int64   `json:"bytes"`
	Messages  int64   `json:"messages"`
	Reads     int64   `json:"reads"`            // perf: Read calls, so that Stats can be put per call
	Writes    int64   `json:"writes,omitempty"` // perf -R: Write calls
	Seconds   float64 `json:"seconds"`
	// Cgo is how many crossings into C the server process made while it
	// served this client (RDMA only): exact when it serves one at a time.
	Cgo uint64 `json:"cgo,omitempty"`
	// Stats is the connection's counters at the end (RDMA only): among
	// them how often the server's calls waited by spinning or parking.
	Stats   *rnet.Stats    `json:"stats,omitempty"`
	Error   string         `json:"error,omitempty"`  // a stream that failed, or a test whose streams did not all come
	Stream  int            `json:"stream,omitempty"` // in a -P test, from 1 as the client numbers them
	Streams []ServerResult `json:"streams,omitempty"`

	start, end time.Time
}

func printServerResult(w io.Writer, asJSON bool, res ServerResult) error {
	if asJSON {
		return writeJSON(w, res)
	}
	for _, s := range res.Streams {
		if _, err := fmt.Fprintln(w, serverLine(s, fmt.Sprintf("[%3d] ", s.Stream))); err != nil {
			return err
		}
	}
	prefix := ""
	if res.Parallel > 0 {
		prefix = fmt.Sprintf("[SUM] %d streams, ", res.Parallel)
	}
	_, err := fmt.Fprintln(w, serverLine(res, prefix))
	return err
}

func serverLine(res ServerResult, prefix string) string {
	test := res.Test
	if res.Reverse {
		test += " -R"
	}
	line := fmt.Sprintf("%s%s %s from %s: %d B messages, %s in %.2f s", prefix, withFallback(res.Transport, res.Fallback), test, res.Client, res.Size, bytesize.Format(uint64(res.Bytes)), res.Seconds)
	if res.Stats != nil {
		calls, what := res.Reads, "read"
		if res.Reverse {
			calls, what = res.Writes, "write"
		}
		if calls > 0 {
			line += fmt.Sprintf("; %.2f cgo calls/%s", float64(res.Cgo)/float64(calls), what)
		}
		line += fmt.Sprintf("; waits: %d spun, %d parked", res.Stats.Spins, res.Stats.Parks)
	}
	if res.Error != "" {
		line += "; error: " + res.Error
	}
	return line
}
