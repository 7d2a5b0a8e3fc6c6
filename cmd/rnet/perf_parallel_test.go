package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/perfjson"
)

// server is `rnet perf -s` run in this process, with its output lines.
type server struct {
	addr  string
	lines []string // stdout, once done is closed
	code  int
	done  chan struct{}
}

// serveInProcess runs `rnet args...` (a perf server) in this process and
// waits for its "listening on" line, on stdout or (with --json) stderr.
func serveInProcess(t *testing.T, args ...string) *server {
	t.Helper()
	s := &server{done: make(chan struct{})}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	addrs := make(chan string, 2)
	var readers sync.WaitGroup
	scan := func(r io.Reader, keep bool) {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := sc.Text()
			if _, rest, ok := strings.Cut(line, "listening on "); ok {
				addr, _, _ := strings.Cut(rest, " ")
				addrs <- addr
				continue
			}
			if keep {
				s.lines = append(s.lines, line)
			}
		}
		io.Copy(io.Discard, r)
	}
	readers.Go(func() { scan(outR, true) })
	readers.Go(func() { scan(errR, false) })
	go func() {
		s.code = run(args, outW, errW)
		outW.Close()
		errW.Close()
		readers.Wait()
		close(s.done)
	}()
	select {
	case s.addr = <-addrs:
	case <-s.done:
		t.Fatalf("rnet %q exited with %d without listening", args, s.code)
	}
	return s
}

func (s *server) wait(t *testing.T) []string {
	t.Helper()
	<-s.done
	if s.code != 0 {
		t.Fatalf("server exit %d, output %q", s.code, s.lines)
	}
	return s.lines
}

func runJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("rnet %q: exit %d: %s %s", args, code, out.String(), errb.String())
	}
	if err := json.Unmarshal(out.Bytes(), v); err != nil {
		t.Fatalf("rnet %q: output is not JSON: %v\n%s", args, err, out.String())
	}
}

// checkIntervals: the intervals tile the test from 0 and add up to its
// bytes, and with -P each one's streams add up to it.
func checkIntervals(t *testing.T, r perfjson.PerfResult) {
	t.Helper()
	if len(r.Intervals) == 0 {
		t.Fatalf("no intervals in %+v", r)
	}
	var sum int64
	at := 0.0
	for _, iv := range r.Intervals {
		if iv.Start != at || iv.End < iv.Start {
			t.Errorf("interval %+v does not follow %.6f", iv, at)
		}
		at = iv.End
		sum += iv.Bytes
		if r.Parallel > 1 {
			var streams int64
			for _, s := range iv.Streams {
				streams += s.Bytes
			}
			if len(iv.Streams) != r.Parallel || streams != iv.Bytes {
				t.Errorf("interval %+v: %d streams adding up to %d", iv, len(iv.Streams), streams)
			}
		}
	}
	if sum != r.Bytes {
		t.Errorf("intervals add up to %d bytes, the result says %d", sum, r.Bytes)
	}
}

// TestPerfParallelTCP: -P 4 shares -n among four connections, and the
// server reports them as one test with four streams.
func TestPerfParallelTCP(t *testing.T) {
	srv := serveInProcess(t, "perf", "-s", "127.0.0.1:0", "-tcp", "-once", "--json")
	var r perfjson.PerfResult
	runJSON(t, &r, "perf", "-c", srv.addr, "-tcp", "-P", "4", "-n", "3000001", "-size", "1000", "--json", "-i", "1ms", "-q")
	if r.Parallel != 4 || len(r.Streams) != 4 || r.Bytes != 3000001 || r.Writes != 3001 || r.MBps <= 0 {
		t.Fatalf("result %+v", r)
	}
	for i, s := range r.Streams {
		if want := int64(750000) + map[bool]int64{true: 1}[i == 0]; s.Stream != i+1 || s.Bytes != want || s.Seconds <= 0 || s.Seconds > r.Seconds {
			t.Errorf("stream %d: %+v, want %d bytes", i+1, s, want)
		}
	}
	checkIntervals(t, r)
	lines := srv.wait(t)
	if len(lines) != 1 {
		t.Fatalf("server printed %d lines, want one for the test: %q", len(lines), lines)
	}
	var sr ServerResult
	if err := json.Unmarshal([]byte(lines[0]), &sr); err != nil || sr.Parallel != 4 || len(sr.Streams) != 4 || sr.Bytes != 3000001 || sr.Error != "" {
		t.Fatalf("server result %s: %+v, %v", lines[0], sr, err)
	}
	for i, s := range sr.Streams {
		if s.Stream != i+1 || s.Bytes != r.Streams[i].Bytes {
			t.Errorf("server's stream %d: %+v; the client's: %+v", i+1, s, r.Streams[i])
		}
	}
}

// TestPerfReverseTCP: with -R the server sends, by bytes or for a time,
// and both ends count the same.
func TestPerfReverseTCP(t *testing.T) {
	srv := startCmd(t, "perf", "-s", "127.0.0.1:0", "-tcp")
	var r perfjson.PerfResult
	runJSON(t, &r, "perf", "-c", srv.addr, "-tcp", "-R", "-n", "2000000", "-size", "4K", "--json", "-q")
	if !r.Reverse || r.Bytes != 2000000 || r.Reads == 0 || r.Writes != 0 || r.Size != 4096 {
		t.Fatalf("result %+v", r)
	}
	checkIntervals(t, r)
	r = perfjson.PerfResult{} // a fresh one: Unmarshal leaves fields the JSON lacks
	runJSON(t, &r, "perf", "-c", srv.addr, "-tcp", "-R", "-t", "20ms", "-P", "2", "--json", "-q")
	if !r.Reverse || r.Bytes <= 0 || r.Parallel != 2 || r.Streams[0].Bytes <= 0 || r.Streams[1].Bytes <= 0 {
		t.Fatalf("result %+v", r)
	}
	checkIntervals(t, r)
	var text, errb bytes.Buffer
	if code := run([]string{"perf", "-c", srv.addr, "-tcp", "-R", "-n", "100000", "-P", "2", "-i", "1ms"}, &text, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(text.String(), "[SUM] 2 streams, tcp") || !strings.Contains(text.String(), " <- ") || !strings.Contains(text.String(), "reads of") {
		t.Errorf("text result:\n%s", text.String())
	}
}

// TestPerfSweepTCP: -a runs one test per power of two from 2 B to 8 MiB.
func TestPerfSweepTCP(t *testing.T) {
	srv := startCmd(t, "perf", "-s", "127.0.0.1:0", "-tcp")
	var sw perfjson.SweepResult
	runJSON(t, &sw, "perf", "-c", srv.addr, "-tcp", "-a", "-n", "4096", "--json")
	if sw.Test != "perf-sweep" || len(sw.Results) != 23 {
		t.Fatalf("sweep of %d results: %+v", len(sw.Results), sw)
	}
	for i, r := range sw.Results {
		if want := max(4096, int64(r.Size)); r.Size != 2<<i || r.Bytes != want {
			t.Errorf("result %d: size %d, %d bytes; want %d", i, r.Size, r.Bytes, want)
		}
	}
	var text, errb bytes.Buffer
	if code := run([]string{"perf", "-c", srv.addr, "-tcp", "-a", "-n", "1024", "-P", "2"}, &text, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	if len(lines) != 2+23 || !strings.HasPrefix(strings.TrimSpace(lines[2]), "2 ") || !strings.HasPrefix(strings.TrimSpace(lines[24]), "8388608 ") {
		t.Errorf("text sweep:\n%s", text.String())
	}
}

// TestErrorsAsJSON: with --json a failure is a JSON object on stdout, and
// the exit status says what kind.
func TestErrorsAsJSON(t *testing.T) {
	srv := startCmd(t, "perf", "-s", "127.0.0.1:0", "-tcp")
	addr := srv.addr
	srv.stop()
	for _, c := range []struct {
		args  []string
		code  int
		usage bool
		has   string
	}{
		{[]string{"perf", "-c", addr, "-tcp", "--json", "-q"}, 1, false, "refused"},
		{[]string{"ping", addr, "-tcp", "--json"}, 1, false, "refused"},
		{[]string{"perf", "-c", addr, "-P", "0", "--json"}, 2, true, "-P must be"},
		{[]string{"perf", "--json", "-bogus"}, 2, true, "-bogus"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		var e ErrorResult
		if err := json.Unmarshal(out.Bytes(), &e); err != nil {
			t.Errorf("rnet %q: stdout is not JSON: %v: %q", c.args, err, out.String())
			continue
		}
		if code != c.code || e.ExitCode != c.code || e.Usage != c.usage || e.Command != c.args[0] || !strings.Contains(e.Error, c.has) {
			t.Errorf("rnet %q: exit %d, %+v; want %d and an error with %q", c.args, code, e, c.code, c.has)
		}
		if c.code == 1 && (e.Address != addr || e.Transport != "tcp") {
			t.Errorf("rnet %q: %+v does not say where", c.args, e)
		}
	}
	// Without --json, stdout stays empty.
	var out, errb bytes.Buffer
	if code := run([]string{"ping", addr, "-tcp"}, &out, &errb); code != 1 || out.Len() != 0 {
		t.Errorf("ping without --json: exit %d, stdout %q", code, out.String())
	}
}

func TestParsePerfFlags(t *testing.T) {
	o, err := parsePerf([]string{"-c", "h", "-P", "4", "-R", "-buffer", "1M", "-busy-poll", "200us", "-busy-poll-limit", "-1ns", "-ack-timeout", "2s"})
	if err != nil {
		t.Fatal(err)
	}
	if o.parallel != 4 || !o.reverse || o.rdma != (rdmaFlags{buffer: 1 << 20, busyPoll: 200 * time.Microsecond, busyPollLimit: -1, ackTimeout: 2 * time.Second}) {
		t.Errorf("parsed %+v", o)
	}
	t.Setenv("RNET_BUFFER_SIZE", "64K")
	t.Setenv("RNET_BUSY_POLL", "1ms")
	c := o.rdma.config()
	if c.SendBufferSize != 1<<20 || c.RecvBufferSize != 1<<20 || c.BusyPoll != 200*time.Microsecond || c.BusyPollLimit != -1 || c.AckTimeout != 2*time.Second {
		t.Errorf("flags over the environment: %+v", c)
	}
	if c := (rdmaFlags{}).config(); c.SendBufferSize != 64<<10 || c.BusyPoll != time.Millisecond {
		t.Errorf("environment alone: %+v", c)
	}
	if o, err := parsePerf([]string{"-c", "h", "-a"}); err != nil || o.duration != time.Second || !o.sweep {
		t.Errorf("-a: %+v, %v; want 1s per size", o, err)
	}
	if o, err := parsePerf([]string{"-c", "h", "-a", "-t", "3s"}); err != nil || o.duration != 3*time.Second {
		t.Errorf("-a -t 3s: %+v, %v", o, err)
	}
	for _, bad := range [][]string{
		{"-c", "h", "-P", "0"}, {"-c", "h", "-P", "129"}, {"-c", "h", "-buffer", "10"}, {"-c", "h", "-buffer", "2G"},
		{"-c", "h", "-n", "3", "-P", "4"}, {"-c", "h", "-t", "25h"}, {"-c", "h", "-R", "-n", "3T", "-P", "2"},
	} {
		if _, err := parsePerf(bad); !errors.Is(err, errUsage) {
			t.Errorf("parsePerf(%q) = %v, want a usage error", bad, err)
		}
	}
}

// TestHelloCompat: a hello from a client before -P (zeros where the
// streams and id now are) is a one-stream test; a reverse hello's tail
// asks for bytes or a time, within bounds.
func TestHelloCompat(t *testing.T) {
	old := []byte("RNT1\x01\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00")
	h, err := decodeHello(old)
	if err != nil || h.streams != 1 || h.stream != 1 || h.size != 65536 || h.mode != modePerf {
		t.Fatalf("old hello = %+v, %v", h, err)
	}
	rev := hello{mode: modePerfReverse, stream: 2, streams: 2, size: 10, test: 5, bytes: 1 << 40}.encode()
	if len(rev) != helloLen+helloExtLen {
		t.Fatalf("reverse hello of %d bytes", len(rev))
	}
	h, err = decodeHello(rev[:helloLen])
	if err == nil {
		err = decodeHelloExt(&h, rev[helloLen:])
	}
	if err != nil || h.bytes != 1<<40 || h.duration != 0 || h.stream != 2 || h.streams != 2 || h.test != 5 {
		t.Fatalf("reverse hello = %+v, %v", h, err)
	}
	for _, ext := range []hello{{}, {bytes: 1, duration: 1}, {bytes: -1}, {bytes: maxReverseBytes + 1}, {duration: maxReverseDuration + 1}} {
		ext.mode, ext.size = modePerfReverse, 1
		var h hello
		if err := decodeHelloExt(&h, ext.encode()[helloLen:]); err == nil {
			t.Errorf("reverse hello asking %d bytes for %v accepted", ext.bytes, ext.duration)
		}
	}
	if _, err := decodeHello(hello{mode: modePerf, size: 1, streams: maxStreams + 1}.encode()); err == nil {
		t.Error("a hello of more streams than the server takes accepted")
	}
	if _, err := decodeHello(hello{mode: modePerf, size: 1, stream: 3, streams: 2}.encode()); err == nil {
		t.Error("a hello of stream 3 of 2 accepted")
	}
}

// TestTestGroups: a -P test is reported once all its streams finish, or,
// when some have not joined within the gather time (expire, called here
// as its timer would), once the ones that came, dropped then, finish; the
// server gathers a bounded number of tests, and a test whose streams have
// all joined leaves its slot.
func TestTestGroups(t *testing.T) {
	reports := make(chan ServerResult, 2)
	g := newTestGroups(time.Hour, func(r ServerResult) { reports <- r })
	defer g.stop()
	t0 := time.Now()
	res := func(stream int, n int64, end time.Duration) ServerResult {
		return ServerResult{Test: "perf", Stream: stream, Client: "10.0.0.1:5", Bytes: n, start: t0, end: t0.Add(end)}
	}
	noDrop := func(err error) { t.Errorf("a stream of a complete test dropped: %v", err) }
	join := func(key string, want int, drop func(error)) *testGroup {
		t.Helper()
		tg, err := g.join(key, want, drop)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	a := join("a", 2, noDrop)
	join("a", 2, noDrop)
	if _, err := g.join("a", 2, noDrop); err == nil {
		t.Error("a third stream joined a test of two")
	}
	g.expire(a) // too late: every stream came
	g.finish(a, res(2, 20, 2*time.Second))
	g.finish(a, res(1, 10, time.Second))
	r := <-reports
	if r.Parallel != 2 || r.Bytes != 30 || r.Seconds != 2 || r.Error != "" || r.Client != "10.0.0.1" || r.Streams[0].Stream != 1 || r.Streams[1].Bytes != 20 {
		t.Errorf("complete test: %+v", r)
	}
	// Two of three streams come; the gather time passes.
	var dropped []error
	drop := func(err error) { dropped = append(dropped, err) }
	b := join("b", 3, drop)
	join("b", 3, drop)
	g.finish(b, res(1, 1, time.Second))
	g.expire(b)
	if len(dropped) != 2 || !strings.Contains(dropped[0].Error(), "only 2 of the 3 streams the client announced came within 1h0m0s (-hello-timeout)") {
		t.Errorf("drops at the gather time: %v", dropped)
	}
	select {
	case r := <-reports:
		t.Fatalf("reported with a stream still running: %+v", r)
	default:
	}
	g.finish(b, res(3, 1, time.Second))
	r = <-reports
	if !strings.Contains(r.Error, "only 2 of the 3") || r.Bytes != 2 {
		t.Errorf("incomplete test: %+v", r)
	}
	c := join("c", 3, drop)
	if _, err := g.join("c", 2, drop); err == nil {
		t.Error("a stream announcing another count joined")
	}
	for i := range maxPendingTests - 1 {
		join(string(rune('d'+i)), 2, drop)
	}
	if _, err := g.join("overflow", 2, drop); err == nil || !strings.Contains(err.Error(), "-hello-timeout") {
		t.Errorf("more than %d tests gathered at once: %v", maxPendingTests, err)
	}
	g.expire(c) // frees c's slot
	join("overflow", 2, drop)
}

// TestPingProgressLines: ping prints a line per -progress interval on
// stderr, none with -q or --json.
func TestPingProgressLines(t *testing.T) {
	srv := startCmd(t, "perf", "-s", "127.0.0.1:0", "-tcp")
	progress := func(args ...string) string {
		var out, errb bytes.Buffer
		args = append([]string{"ping", srv.addr, "-tcp", "-c", "30", "-warmup", "0", "-i", "1ms", "-progress", "1ns"}, args...)
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("rnet %q: exit %d: %s", args, code, errb.String())
		}
		return errb.String()
	}
	if s := progress(); strings.Count(s, "round trips") < 2 || !strings.Contains(s, "µs p50") {
		t.Errorf("progress lines:\n%s", s)
	}
	if s := progress("-q"); s != "" {
		t.Errorf("-q printed %q", s)
	}
	if s := progress("--json"); s != "" {
		t.Errorf("--json printed %q on stderr", s)
	}
}

// TestReverseAgainstAServerThatRefuses: a server that closes at a -R
// hello, as one from before -R does, is an error, not a test of 0 bytes.
// (One that closes with the hello's tail unread resets the connection,
// which is an error too.)
func TestReverseAgainstAServerThatRefuses(t *testing.T) {
	addr := refusingServer(t, helloLen+helloExtLen)
	var out, errb bytes.Buffer
	if code := run([]string{"perf", "-c", addr, "-tcp", "-R", "-q"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "sent nothing") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// TestPerfParallelStreamFailure: when one stream of a -P test fails, the
// others, blocked on a server that neither reads nor answers them, end
// too, and the error names the stream that failed.
func TestPerfParallelStreamFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for range 2 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b := make([]byte, helloLen)
			io.ReadFull(c, b)
			h, _ := decodeHello(b)
			if h.stream == 2 {
				c.Close() // stream 2 is dropped
				continue
			}
			held = append(held, c) // stream 1 is never read
		}
	}()
	var out, errb bytes.Buffer
	code := run([]string{"perf", "-c", ln.Addr().String(), "-tcp", "-P", "2", "-n", "512M", "-q"}, &out, &errb)
	<-accepted
	if code != 1 || !strings.Contains(errb.String(), "stream 2 of 2: ") {
		t.Errorf("exit %d, stderr %q; want 1 and the dropped stream named", code, errb.String())
	}
}

// TestMeterIntervalsFollowEachOther: a tick whose time comes before the
// last interval's end still gives an interval that starts where the last
// one ended, with no negative length.
func TestMeterIntervalsFollowEachOther(t *testing.T) {
	start := time.Now()
	m := &meter{streams: []*perfStream{{}}, start: start, last: make([]int64, 1), lastT: start}
	m.record(start.Add(2 * time.Millisecond))
	m.record(start.Add(time.Millisecond)) // late, or read on another CPU
	m.record(start.Add(3 * time.Millisecond))
	at := 0.0
	for _, iv := range m.records {
		if iv.Start != at || iv.End < iv.Start {
			t.Fatalf("intervals %+v: %+v does not follow %.6f", m.records, iv, at)
		}
		at = iv.End
	}
}
