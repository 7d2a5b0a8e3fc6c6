package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rnet-dev/rnet/internal/perfjson"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/rnet"
)

type perfOpts struct {
	server   bool
	addr     string // listen address (-s) or server (-c)
	client   string
	from     string
	size     int
	duration time.Duration
	bytes    int64
	interval time.Duration
	parallel int
	reverse  bool
	sweep    bool
	tcp      bool
	fallback bool
	json     bool
	quiet    bool
	once     bool
	rdma     rdmaFlags
	limits   serverLimits
	// timeUp, if set, says when -t has passed in place of the clock
	// (tests): once it is true.
	timeUp *atomic.Bool
}

const perfUsage = `usage: rnet perf -s [addr] [flags]          serve perf and ping clients (default :7471)
       rnet perf -c host[:port] [flags]     measure throughput to a server
`

// perfFlags defines perf's flags on a new FlagSet that fills o.
func perfFlags(o *perfOpts, size *int64, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("rnet perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printHelp(fs.Output(), perfUsage, fs) }
	fs.BoolVar(&o.server, "s", false, "serve perf and ping clients, on [addr] (default :7471)")
	fs.StringVar(&o.client, "c", "", "run the client against `host[:port]`")
	fs.StringVar(&o.from, "from", "", "client: local `IP` to connect from (picks the RDMA device)")
	fs.Var(byteSize{size}, "size", "client: `bytes` per write, such as 64, 4K or 1M (default 64K)")
	fs.DurationVar(&o.duration, "t", 10*time.Second, "client: how long to send (with -a: per size, default 1s)")
	fs.Var(byteSize{&o.bytes}, "n", "client: send this many `bytes` in all (such as 1G) instead of for -t")
	fs.DurationVar(&o.interval, "i", time.Second, "client: interval of the progress lines and of --json's intervals")
	fs.IntVar(&o.parallel, "P", 1, "client: parallel streams, each its own connection (-n is shared among them)")
	fs.BoolVar(&o.reverse, "R", false, "client: reverse the direction: the server sends, the client receives")
	fs.BoolVar(&o.sweep, "a", false, "client: sweep -size from 2 B to 8 MiB in powers of two, one line per size (each moves -n bytes, at least one write per stream)")
	fs.BoolVar(&o.tcp, "tcp", false, "use TCP instead of RDMA (the baseline)")
	fs.BoolVar(&o.fallback, "fallback", false, "client: fall back to TCP where RDMA cannot be used; server: serve RDMA and TCP on one port")
	fs.BoolVar(&o.json, "json", false, "print the summary as JSON (errors too, as {\"error\": ...})")
	fs.BoolVar(&o.quiet, "q", false, "client: no progress lines")
	fs.BoolVar(&o.once, "once", false, "server: exit after serving one test (all of a -P test's streams)")
	o.rdma.register(fs)
	o.limits.register(fs)
	return fs
}

func parsePerf(args []string, stderr io.Writer) (perfOpts, error) {
	o := perfOpts{}
	size := int64(64 << 10)
	fs := perfFlags(&o, &size, stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return o, err
	}
	o.size = int(min(size, maxSize+1))
	if o.sweep && !flagSet(fs, "t") {
		o.duration = time.Second
	}
	switch {
	case o.server && o.client != "":
		return o, usageErr(stderr, "perf: -s and -c exclude each other")
	case !o.server && o.client == "":
		return o, usageErr(stderr, "perf: pass -s [addr] to serve or -c host to measure")
	case len(pos) > 1 || (len(pos) == 1 && !o.server):
		return o, usageErr(stderr, "perf: unexpected arguments %q", pos)
	case o.size <= 0 || o.size > maxSize:
		return o, usageErr(stderr, "perf: -size must be in 1..%d", maxSize)
	case o.bytes < 0 || o.duration <= 0 || o.interval <= 0:
		return o, usageErr(stderr, "perf: -n, -t and -i must be positive")
	case o.duration > maxReverseDuration:
		return o, usageErr(stderr, "perf: -t must be at most %v", maxReverseDuration)
	case o.parallel < 1 || o.parallel > maxStreams:
		return o, usageErr(stderr, "perf: -P must be in 1..%d", maxStreams)
	case o.bytes > 0 && o.bytes < int64(o.parallel):
		return o, usageErr(stderr, "perf: -n %d cannot be shared among -P %d streams", o.bytes, o.parallel)
	case o.reverse && share(o.bytes, 0, o.parallel) > maxReverseBytes:
		return o, usageErr(stderr, "perf: with -R a stream takes at most 1T (-n %d over -P %d streams); raise -P", o.bytes, o.parallel)
	}
	if err := o.rdma.check(); err != nil {
		return o, usageErr(stderr, "perf: %v", err)
	}
	if err := o.limits.check(); err != nil {
		return o, usageErr(stderr, "perf: %v", err)
	}
	target := o.client
	if o.server && len(pos) == 1 {
		target = pos[0]
	}
	if o.addr, err = hostPort(target); err != nil {
		return o, usageErr(stderr, "perf: %v", err)
	}
	return o, nil
}

// flagSet reports whether the command line set the named flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// sweepSizes are -a's write sizes, as ib_write_bw -a runs them.
func sweepSizes() []int {
	var s []int
	for n := 2; n <= 8<<20; n *= 2 {
		s = append(s, n)
	}
	return s
}

func runPerf(o perfOpts, stdout, stderr io.Writer) error {
	o.parallel = max(o.parallel, 1)
	cfg := o.rdma.config()
	if !o.sweep {
		r, err := perfTest(o, o.size, cfg, stderr, !o.quiet)
		if err != nil {
			return err
		}
		return printPerf(stdout, o.json, r)
	}
	sw := perfjson.SweepResult{Test: "perf-sweep", Reverse: o.reverse, Parallel: o.parallel}
	if !o.json {
		printSweepHeader(stdout, o)
	}
	for _, size := range sweepSizes() {
		// Every stream makes at least one whole write of each size.
		so := o
		if so.bytes > 0 {
			so.bytes = max(so.bytes, int64(size)*int64(so.parallel))
		}
		r, err := perfTest(so, size, cfg, stderr, false)
		if err != nil {
			return fmt.Errorf("-a at %d B: %w", size, err)
		}
		sw.Results = append(sw.Results, r)
		if !o.json {
			printSweepLine(stdout, r)
		}
	}
	if o.json {
		return writeJSON(stdout, sw)
	}
	return nil
}

// perfStream is one connection of a test and what it has moved.
type perfStream struct {
	c     net.Conn
	moved atomic.Int64 // bytes written (reads, with -R)
	calls int64        // Write calls (Read calls, with -R)
	end   time.Time    // when the peer had counted every byte
}

// perfTest runs one test of -P streams at one write size.
func perfTest(o perfOpts, size int, cfg *rnet.Config, stderr io.Writer, progress bool) (perfjson.PerfResult, error) {
	streams := make([]*perfStream, o.parallel)
	defer func() {
		for _, s := range streams {
			if s != nil {
				s.c.Close()
			}
		}
	}()
	// Every stream connects before any starts, so that they run together.
	for i := range streams {
		c, err := dial(o.tcp, o.fallback, o.addr, o.from, cfg)
		if err != nil {
			return perfjson.PerfResult{}, streamErr(i, o.parallel, "dial", err)
		}
		streams[i] = &perfStream{c: c}
	}
	h := hello{mode: modePerf, streams: uint16(o.parallel), size: uint32(size), test: rand.Uint32()}
	if o.reverse {
		h.mode = modePerfReverse
	}
	for i, s := range streams {
		h.stream = byte(i + 1)
		if o.reverse {
			h.bytes, h.duration = share(o.bytes, i, o.parallel), 0
			if o.bytes == 0 {
				h.duration = o.duration
			}
		}
		if _, err := s.c.Write(h.encode()); err != nil {
			return perfjson.PerfResult{}, streamErr(i, o.parallel, "hello", err)
		}
	}
	start := time.Now()
	end := start.Add(o.duration)
	timeUp := func() bool { return time.Now().After(end) }
	if o.timeUp != nil {
		timeUp = o.timeUp.Load
	}
	m := startMeter(streams, start, o.interval, o.reverse, progress, stderr)
	cgo0 := verbs.CgoCalls()
	errs := make([]error, len(streams))
	var wg sync.WaitGroup
	var closeAll sync.Once
	for i, s := range streams {
		wg.Go(func() {
			if o.reverse {
				errs[i] = s.receive(size)
			} else {
				errs[i] = s.send(size, share(o.bytes, i, o.parallel), timeUp)
			}
			if errs[i] != nil {
				// The others may wait on a server that has given up:
				// closing their connections ends their calls.
				closeAll.Do(func() {
					for _, s := range streams {
						s.c.Close()
					}
				})
			}
		})
	}
	wg.Wait()
	cgo := verbs.CgoCalls() - cgo0
	intervals := m.stop()
	if i, err := firstCause(errs); err != nil {
		return perfjson.PerfResult{}, streamErr(i, o.parallel, "", err)
	}
	return perfResult(o, size, start, streams, intervals, cgo), nil
}

// firstCause is the first stream's error that is not its connection closed
// after another stream failed, and that stream's index.
func firstCause(errs []error) (int, error) {
	first := -1
	for i, err := range errs {
		if err != nil && !errors.Is(err, net.ErrClosed) {
			return i, err
		}
		if err != nil && first < 0 {
			first = i
		}
	}
	if first < 0 {
		return 0, nil
	}
	return first, errs[first]
}

// share is stream i's part of n bytes among streams: the first n%streams
// get one byte more, so that the parts add up to n.
func share(n int64, i, streams int) int64 {
	part := n / int64(streams)
	if int64(i) < n%int64(streams) {
		part++
	}
	return part
}

func streamErr(i, streams int, step string, err error) error {
	if step != "" {
		err = fmt.Errorf("%s: %w", step, err)
	}
	if streams == 1 {
		return err
	}
	return fmt.Errorf("stream %d of %d: %w", i+1, streams, err)
}

// send writes size-byte writes until it has sent bytes (if positive) or
// until the first write that ends once timeUp says -t has passed, then
// half-closes and waits for the server's count.
func (s *perfStream) send(size int, bytes int64, timeUp func() bool) error {
	buf := make([]byte, size)
	for {
		if bytes > 0 {
			left := bytes - s.moved.Load()
			if left <= 0 {
				break
			}
			if left < int64(len(buf)) {
				buf = buf[:left]
			}
		} else if s.calls > 0 && timeUp() {
			// At least one write, however late the stream started: a
			// clock read is cheap next to a Write.
			break
		}
		n, err := s.c.Write(buf)
		s.moved.Add(int64(n))
		s.calls++
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	if cw, ok := s.c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	got, err := readAck(s.c)
	s.end = time.Now()
	if err != nil {
		return fmt.Errorf("waiting for the server's count: %w", err)
	}
	if got != uint64(s.moved.Load()) {
		return fmt.Errorf("server received %d bytes, sent %d", got, s.moved.Load())
	}
	return nil
}

// receive reads what the server sends until it half-closes, then tells it
// how much came.
func (s *perfStream) receive(size int) error {
	buf := make([]byte, max(size, 256<<10))
	for {
		n, err := s.c.Read(buf)
		s.moved.Add(int64(n))
		s.calls++
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
	}
	s.end = time.Now()
	if s.moved.Load() == 0 {
		// A server that takes -R always sends something.
		return errors.New("the server sent nothing: it refused the test (see its output), or it predates -R")
	}
	if err := writeAck(s.c, s.moved.Load()); err != nil {
		return fmt.Errorf("sending the count: %w", err)
	}
	return nil
}

func perfResult(o perfOpts, size int, start time.Time, streams []*perfStream, intervals []perfjson.Interval, cgo uint64) perfjson.PerfResult {
	c := streams[0].c
	r := perfjson.PerfResult{
		Test: "perf", Server: c.RemoteAddr().String(), Local: c.LocalAddr().String(),
		Size: size, Reverse: o.reverse, Intervals: intervals,
	}
	r.Transport, r.Fallback = transportOf(c, o.tcp)
	var end time.Time
	var calls int64
	for i, s := range streams {
		if s.end.After(end) {
			end = s.end
		}
		calls += s.calls
		r.Bytes += s.moved.Load()
		if len(streams) > 1 {
			sr := perfjson.StreamResult{Stream: i + 1, Local: s.c.LocalAddr().String(), Bytes: s.moved.Load(), Seconds: s.end.Sub(start).Seconds()}
			sr.MBps = mbps(sr.Bytes, sr.Seconds)
			if rc, ok := s.c.(*rnet.Conn); ok {
				st := rc.Stats()
				sr.Stats = &st
			}
			r.Streams = append(r.Streams, sr)
		}
	}
	if len(streams) > 1 {
		r.Parallel = len(streams)
	}
	r.Seconds = end.Sub(start).Seconds()
	r.MBps = mbps(r.Bytes, r.Seconds)
	r.Gbps = r.MBps * 8 / 1000
	if o.reverse {
		r.Reads = calls
	} else {
		r.Writes = calls
	}
	if rc, ok := c.(*rnet.Conn); ok {
		if len(streams) == 1 {
			st := rc.Stats()
			r.Stats = &st
		}
		perCall := float64(cgo) / float64(max(calls, 1))
		if o.reverse {
			r.CgoPerRead = perCall
		} else {
			r.CgoPerWrite = perCall
		}
	}
	return r
}

func mbps(bytes int64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(bytes) / seconds / 1e6
}
