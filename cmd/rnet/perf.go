package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/perfjson"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/rnet"
)

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
		c, err := dial(o.tcp, o.fallback, o.addr, o.from, o.device, cfg)
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

func streamErr(i, streams int, step string, err error) error {
	if step != "" {
		err = fmt.Errorf("%s: %w", step, err)
	}
	if streams == 1 {
		return err
	}
	return fmt.Errorf("stream %d of %d: %w", i+1, streams, err)
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
