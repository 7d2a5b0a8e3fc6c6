// Command rnet-benchreport measures rnet against C rsocket (rstream), the
// device's own limit (ib_write_bw, ib_write_lat) and TCP, side by side on
// one pair of RDMA devices, repeats every measurement -runs times, and
// writes the medians as a table (stdout and bench.txt), JSON (bench.json)
// and an SVG plot (bench.svg). `make bench` runs it in the Soft-RoCE guest.
//
//	rnet-benchreport -rnet ./rnet -runs 3 -out bench-results
//	rnet-benchreport -replot bench-results/bench.json   # table and SVG again
//
// rnet's and TCP's figures come from the rnet command (rnet perf, rnet ping
// and their -tcp baselines), so they are what a user reproduces by hand.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rnet-dev/rnet/internal/stats"
)

type config struct {
	rnet           string
	runs           int
	out            string
	server, client string
	sdev, cdev     string
	gid            int
	scale          float64
	port           int
	verbose        bool
	rnetBuffer     int
	gofloor        string // benchmarks/gofloor, or "" to skip the floor
	gofloorC       string // its C twin
}

func main() {
	var c config
	replot := flag.String("replot", "", "read this bench.json and write its table and SVG next to it, measuring nothing")
	flag.StringVar(&c.rnet, "rnet", "", "the rnet command (default: rnet next to this program)")
	flag.IntVar(&c.runs, "runs", 3, "repeat every measurement this many times; report medians")
	flag.StringVar(&c.out, "out", "bench-results", "directory for bench.json, bench.txt and bench.svg")
	flag.StringVar(&c.server, "server", envOr("RNET_TEST_SERVER", "10.77.0.2"), "server IP (on -sdev)")
	flag.StringVar(&c.client, "client", envOr("RNET_TEST_CLIENT", "10.77.0.1"), "client IP (on -cdev)")
	flag.StringVar(&c.sdev, "sdev", "rxe1", "server RDMA device, for ib_write_*")
	flag.StringVar(&c.cdev, "cdev", "rxe0", "client RDMA device, for ib_write_*")
	flag.IntVar(&c.gid, "gid", 1, "GID index of the IPv4 addresses, for ib_write_* (-x)")
	flag.Float64Var(&c.scale, "scale", 1, "scale the bytes and iterations of every test")
	flag.IntVar(&c.port, "port", 18100, "first TCP/RDMA port to use")
	flag.BoolVar(&c.verbose, "v", false, "print every command and its output")
	flag.StringVar(&c.gofloor, "gofloor", "", "benchmarks/gofloor's binary, for the Go runtime's floor (default: gofloor next to this program, skipped if absent; \"none\" skips it)")
	flag.StringVar(&c.gofloorC, "gofloor-c", "", "gofloor's C twin (default: gofloor-c next to gofloor)")
	flag.IntVar(&c.rnetBuffer, "rnet-buffer", 1<<20, "rnet's ring size in bytes (RNET_BUFFER_SIZE); the default matches rstream, which asks for 512 KiB SO_SNDBUF/SO_RCVBUF and rsocket doubles that; 0 keeps rnet's default")
	flag.Parse()
	if *replot != "" {
		if err := replotFile(*replot); err != nil {
			fmt.Fprintln(os.Stderr, "rnet-benchreport:", err)
			os.Exit(1)
		}
		return
	}
	exe, _ := os.Executable()
	if c.rnet == "" {
		c.rnet = filepath.Join(filepath.Dir(exe), "rnet")
	}
	switch c.gofloor {
	case "none":
		c.gofloor = ""
	case "":
		if p := filepath.Join(filepath.Dir(exe), "gofloor"); fileExists(p) {
			c.gofloor = p
		}
	}
	if c.gofloor != "" && c.gofloorC == "" {
		c.gofloorC = filepath.Join(filepath.Dir(c.gofloor), "gofloor-c")
	}
	if c.runs < 1 {
		fmt.Fprintln(os.Stderr, "rnet-benchreport: -runs must be at least 1")
		os.Exit(2)
	}
	r, err := measure(&c)
	if err == nil {
		err = write(r, c.out, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rnet-benchreport:", err)
		os.Exit(1)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func replotFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return write(&r, filepath.Dir(path), os.Stdout)
}

func write(r *Report, dir string, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var table strings.Builder
	r.WriteTable(&table)
	fmt.Fprint(stdout, table.String())
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.txt"), []byte(table.String()), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "bench.svg"))
	if err != nil {
		return err
	}
	if err := r.WriteSVG(f); err != nil {
		f.Close()
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s/bench.json, bench.txt and bench.svg\n", dir)
	return f.Close()
}

var (
	throughputSizes = []int{64, 1 << 10, 4 << 10, 64 << 10, 1 << 20}
	latencySizes    = []int{64, 1 << 10, 4 << 10, 64 << 10}
)

// bwBytes is how much one throughput test moves at a size (before -scale):
// enough for a second or more at Soft-RoCE-under-TCG speeds.
func bwBytes(size int) int {
	switch {
	case size <= 64:
		return 1 << 20
	case size <= 1<<10:
		return 4 << 20
	case size <= 4<<10:
		return 8 << 20
	}
	return 16 << 20
}

func latIters(size int) int {
	if size >= 64<<10 {
		return 200
	}
	return 1000
}

func (c *config) scaled(n, min int) int {
	return max(int(float64(n)*c.scale), min)
}

// measurer runs one transport's test at one size: the figures it returns are
// keyed by kind (Throughput, Latency, LatencyP50).
type measurer func(ctx context.Context, c *config, port, size int) (map[string]float64, error)

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
		unit, stat := "MB/s", "one run's throughput"
		if kind != Throughput {
			unit, stat = "µs", "one run's mean round trip"
			if kind == LatencyP50 {
				stat = "one run's median round trip"
			}
		}
		s := &Series{Transport: transport, Kind: kind, Size: size, Unit: unit, Statistic: stat}
		*list = append(*list, s)
		return s
	}
	port := c.port
	for run := 1; run <= c.runs; run++ {
		fmt.Fprintf(os.Stderr, "== run %d of %d\n", run, c.runs)
		// Interleave the transports at each size, so that a slow patch of
		// the machine hurts them alike, and start each run with the next
		// one: going first or right after another transport moved a
		// transport's figure by several percent in the lab, and a fixed
		// order would put that into every run's ratio.
		for _, group := range []struct {
			sizes []int
			tests []test
		}{{throughputSizes, bw}, {latencySizes, lat}} {
			for _, size := range group.sizes {
				for _, t := range rotated(group.tests, run-1) {
					port++
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
					start := time.Now()
					vals, err := t.run(ctx, c, port, size)
					cancel()
					for k, v := range vals {
						if err == nil && (math.IsNaN(v) || math.IsInf(v, 0) || v <= 0) {
							err = fmt.Errorf("implausible %s %v", k, v)
						}
					}
					if err != nil {
						series(&r.Series, t.transport, t.kind, size).Failures++
						fmt.Fprintf(os.Stderr, "   %-13s %-10s %5s: FAILED: %v\n", t.transport, t.kind, sizeName(size), err)
						continue
					}
					var parts []string
					for _, k := range []string{Throughput, Latency, LatencyP50} {
						v, ok := vals[k]
						if !ok {
							continue
						}
						list := &r.Series
						if k == LatencyP50 {
							list = &r.Extra
						}
						s := series(list, t.transport, k, size)
						s.Runs = append(s.Runs, v)
						parts = append(parts, fmt.Sprintf("%s %s", k, fmtVal(v)))
					}
					fmt.Fprintf(os.Stderr, "   %-13s %5s: %s (%.1f s)\n", t.transport, sizeName(size), strings.Join(parts, ", "), time.Since(start).Seconds())
				}
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

// Floor variants of benchmarks/gofloor, as Extra series (size 0): a
// shared-memory ping-pong with no RDMA, in C and in Go.
const (
	FloorC  = "floor-c"      // the C twin
	FloorGo = "floor-go-cgo" // Go polling through cgo with one yield per wait, as rnet's reply wait
)

// floorWork is the µs each side of the floor works per message, so that its
// round trip is about rstream's 64 B round trip in the lab.
const floorWork = 20

// runFloor runs gofloor once (its C twin and its rnet-like Go variant) and
// returns each variant's mean and median round trip.
func runFloor(ctx context.Context, c *config) (map[string]map[string]float64, error) {
	out, err := runClient(ctx, c, nil, c.gofloor, "-c", c.gofloorC, "-runs", "1", "-json",
		"-n", strconv.Itoa(c.scaled(5000, 200)), "-work", strconv.Itoa(floorWork))
	if err != nil {
		return nil, err
	}
	return parseFloor(out)
}

// parseFloor reads gofloor -json's lines: one JSON object per variant.
func parseFloor(out string) (map[string]map[string]float64, error) {
	names := map[string]string{"c": FloorC, "go-cgo": FloorGo}
	got := map[string]map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var res struct {
			Variant string  `json:"variant"`
			P50Us   float64 `json:"p50_us"`
			MeanUs  float64 `json:"mean_us"`
		}
		if !strings.HasPrefix(line, "{") {
			continue
		}
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return nil, fmt.Errorf("gofloor output %q: %w", line, err)
		}
		if name, ok := names[res.Variant]; ok && res.MeanUs > 0 && res.P50Us > 0 {
			got[name] = map[string]float64{Latency: res.MeanUs, LatencyP50: res.P50Us}
		}
	}
	if len(got) != len(names) {
		return nil, fmt.Errorf("gofloor output lacks a variant: %q", out)
	}
	return got, nil
}

// proc is a started server process whose output is kept.
type proc struct {
	cmd  *exec.Cmd
	out  strings.Builder
	done chan error
}

// startServer starts argv and, if ready is not empty, waits until a line of
// its stdout contains ready.
func startServer(ctx context.Context, c *config, ready string, env []string, argv ...string) (*proc, error) {
	p := &proc{cmd: command(ctx, env, argv), done: make(chan error, 1)}
	if c.verbose {
		fmt.Fprintln(os.Stderr, "   $", strings.Join(append(env, argv...), " "), "&")
	}
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	seen := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			p.out.WriteString(sc.Text() + "\n")
			if !once && ready != "" && strings.Contains(sc.Text(), ready) {
				once = true
				close(seen)
			}
		}
		if !once {
			close(seen)
		}
	}()
	go func() { err := p.cmd.Wait(); pw.Close(); p.done <- err }()
	if ready != "" {
		<-seen
		if !strings.Contains(p.out.String(), ready) {
			return nil, fmt.Errorf("%s exited before it was ready: %s", argv[0], strings.TrimSpace(p.out.String()))
		}
	}
	return p, nil
}

// running reports whether the server has not exited yet.
func (p *proc) running() bool {
	select {
	case err := <-p.done:
		p.done <- err // keep it for wait
		return false
	default:
		return true
	}
}

func (p *proc) wait() error {
	err := <-p.done
	if err != nil {
		return fmt.Errorf("server %s: %v: %s", p.cmd.Args[0], err, strings.TrimSpace(p.out.String()))
	}
	return nil
}

func (p *proc) kill() {
	if p.cmd.Process != nil {
		p.cmd.Process.Kill()
	}
}

// command is argv with env added to this process's environment.
func command(ctx context.Context, env, argv []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...) // the last of a repeated key wins
	}
	return cmd
}

func runClient(ctx context.Context, c *config, env []string, argv ...string) (string, error) {
	if c.verbose {
		fmt.Fprintln(os.Stderr, "   $", strings.Join(append(env, argv...), " "))
	}
	out, err := command(ctx, env, argv).CombinedOutput()
	if c.verbose {
		fmt.Fprint(os.Stderr, string(out))
	}
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", argv[0], err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// clientRetrying runs a C tool's client until it connects: those servers say
// nothing when they are listening, so the client's refusal is the only sign.
// Each retry waits for a failed connect, not a fixed time.
// With serverUp, any failure is retried while the server still runs
// (rstream's client reports a connect that raced the server's listen as an
// rpoll error); otherwise only refusals are.
func clientRetrying(ctx context.Context, c *config, ok func(string) bool, serverUp func() bool, argv ...string) (string, error) {
	var last error
	for attempt := 0; attempt < 50 && ctx.Err() == nil; attempt++ {
		out, err := runClient(ctx, c, nil, argv...)
		if err == nil && ok(out) {
			return out, nil
		}
		if err == nil {
			err = fmt.Errorf("%s printed no result: %s", argv[0], strings.TrimSpace(out))
		}
		last = err
		if !refused(out) && (serverUp == nil || !serverUp()) {
			return out, err
		}
		select { // a refused connect returns at once: pace the retries
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return "", fmt.Errorf("gave up connecting: %w", last)
}

func refused(out string) bool {
	for _, s := range []string{"refused", "Couldn't connect", "Unable to", "rconnect", "Failed to", "rejected"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

// rnetPerf measures rnet perf; env is added to both processes' environment
// (RNET_BUSY_POLL for rnet-poll).
func rnetPerf(tcp bool, env ...string) measurer {
	return func(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
		addr := c.server + ":" + strconv.Itoa(port)
		sargs, cargs := []string{c.rnet, "perf", "-s", addr, "-once"}, []string{c.rnet, "perf", "-c", addr, "-from", c.client,
			"-size", strconv.Itoa(size), "-n", strconv.Itoa(c.scaled(bwBytes(size), size)), "-q", "--json"}
		if tcp {
			sargs, cargs = append(sargs, "-tcp"), append(cargs, "-tcp")
		}
		srv, err := startServer(ctx, c, "listening on", env, sargs...)
		if err != nil {
			return nil, err
		}
		out, err := runClient(ctx, c, env, cargs...)
		if err != nil {
			srv.kill()
			srv.wait()
			return nil, err
		}
		if err := srv.wait(); err != nil {
			return nil, err
		}
		var res struct {
			MBps float64 `json:"MBps"`
		}
		if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil {
			return nil, fmt.Errorf("rnet perf output %q: %w", out, err)
		}
		return map[string]float64{Throughput: res.MBps}, nil
	}
}

func rnetPing(tcp bool, env ...string) measurer {
	return func(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
		addr := c.server + ":" + strconv.Itoa(port)
		sargs, cargs := []string{c.rnet, "perf", "-s", addr, "-once"}, []string{c.rnet, "ping", addr, "-from", c.client,
			"-size", strconv.Itoa(size), "-n", strconv.Itoa(c.scaled(latIters(size), 20)), "-warmup", "50", "--json"}
		if tcp {
			sargs, cargs = append(sargs, "-tcp"), append(cargs, "-tcp")
		}
		srv, err := startServer(ctx, c, "listening on", env, sargs...)
		if err != nil {
			return nil, err
		}
		out, err := runClient(ctx, c, env, cargs...)
		if err != nil {
			srv.kill()
			srv.wait()
			return nil, err
		}
		if err := srv.wait(); err != nil {
			return nil, err
		}
		var res struct {
			P50Us  float64 `json:"p50_us"`
			MeanUs float64 `json:"mean_us"`
		}
		if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil {
			return nil, fmt.Errorf("rnet ping output %q: %w", out, err)
		}
		return map[string]float64{Latency: res.MeanUs, LatencyP50: res.P50Us}, nil
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// rstream runs C rstream's server and client with -S size -C count -I iters
// and the extra options, and returns the client's usec/xfer.
func rstream(ctx context.Context, c *config, port, size, count, iters int, extra ...string) (float64, error) {
	args := append([]string{"-p", strconv.Itoa(port), "-S", strconv.Itoa(size), "-C", strconv.Itoa(count), "-I", strconv.Itoa(iters)}, extra...)
	srv, err := startServer(ctx, c, "", nil, append([]string{"rstream", "-b", c.server}, args...)...)
	if err != nil {
		return 0, err
	}
	out, err := clientRetrying(ctx, c, func(o string) bool { _, err := parseRstream(o); return err == nil },
		srv.running, append([]string{"rstream", "-s", c.server, "-b", c.client}, args...)...)
	if err != nil {
		srv.kill()
		srv.wait()
		return 0, err
	}
	if err := srv.wait(); err != nil {
		return 0, err
	}
	return parseRstream(out)
}

// parseRstream reads usec/xfer from rstream's result line:
// "custom 64k 300 1 37m 2.32s 0.14 3873.00".
func parseRstream(out string) (float64, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 8 && f[0] == "custom" && strings.HasSuffix(f[5], "s") {
			return strconv.ParseFloat(f[7], 64)
		}
	}
	return 0, errors.New("no rstream result line")
}

// rstreamBW measures rstream's throughput; extra is "-T b" for
// rstream-block.
func rstreamBW(extra ...string) measurer {
	return func(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
		count := max(c.scaled(bwBytes(size), size)/size, 1)
		us, err := rstream(ctx, c, port, size, count, 1, extra...)
		if err != nil {
			return nil, err
		}
		return map[string]float64{Throughput: float64(size) / us}, nil // bytes/µs = MB/s
	}
}

func rstreamLat(extra ...string) measurer {
	return func(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
		us, err := rstream(ctx, c, port, size, 1, c.scaled(latIters(size), 20), extra...)
		if err != nil {
			return nil, err
		}
		return map[string]float64{Latency: 2 * us}, nil
	}
}

// perftest runs ib_write_bw or ib_write_lat between the two devices and
// returns the fields of the result line (the one after the "#bytes" header).
func perftest(ctx context.Context, c *config, tool string, port int, extra ...string) ([]string, error) {
	common := append([]string{"-x", strconv.Itoa(c.gid), "-F", "-p", strconv.Itoa(port)}, extra...)
	srv, err := startServer(ctx, c, "", nil, append([]string{tool, "-d", c.sdev}, common...)...)
	if err != nil {
		return nil, err
	}
	out, err := clientRetrying(ctx, c, func(o string) bool { _, err := parsePerftest(o); return err == nil },
		nil, append(append([]string{tool, "-d", c.cdev}, common...), c.server)...)
	if err != nil {
		srv.kill()
		srv.wait()
		return nil, err
	}
	if err := srv.wait(); err != nil {
		return nil, err
	}
	return parsePerftest(out)
}

func parsePerftest(out string) ([]string, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, "#bytes") && i+1 < len(lines) {
			f := strings.Fields(lines[i+1])
			if len(f) >= 5 {
				if _, err := strconv.Atoi(f[0]); err == nil {
					return f, nil
				}
			}
		}
	}
	return nil, errors.New("no perftest result line")
}

func ibWriteBW(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
	iters := max(c.scaled(bwBytes(size), size)/size, 20)
	f, err := perftest(ctx, c, "ib_write_bw", port, "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters))
	if err != nil {
		return nil, err
	}
	// #bytes #iterations BW-peak BW-average MsgRate; perftest's MB is 2^20 bytes.
	avg, err := strconv.ParseFloat(f[3], 64)
	if err != nil {
		return nil, fmt.Errorf("ib_write_bw BW average %q: %w", f[3], err)
	}
	return map[string]float64{Throughput: avg * (1 << 20) / 1e6}, nil
}

func ibWriteLat(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
	f, err := perftest(ctx, c, "ib_write_lat", port, "-s", strconv.Itoa(size), "-n", strconv.Itoa(c.scaled(latIters(size), 20)))
	if err != nil {
		return nil, err
	}
	// #bytes #iterations t_min t_max t_typical t_avg ...: half round trips.
	if len(f) < 6 {
		return nil, fmt.Errorf("ib_write_lat result %q", f)
	}
	typ, err1 := strconv.ParseFloat(f[4], 64)
	avg, err2 := strconv.ParseFloat(f[5], 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("ib_write_lat result %q: %w", f, err)
	}
	return map[string]float64{Latency: 2 * avg, LatencyP50: 2 * typ}, nil
}

// rotated returns list starting at its k-th element (modulo its length),
// wrapping around.
func rotated[T any](list []T, k int) []T {
	if len(list) == 0 {
		return nil
	}
	k %= len(list)
	return append(append(make([]T, 0, len(list)), list[k:]...), list[:k]...)
}
