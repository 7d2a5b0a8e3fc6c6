//go:build linux && cgo

package interop

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
)

// rsTest is one of rstream's tests: after a 16-byte sync each way, for iters
// iterations the client sends count transfers of size bytes and the server
// sends them back.
type rsTest struct {
	name               string
	size, count, iters int
}

// rstreamSizes are the entries of rstream's size table it runs by default
// (option 0; -S all adds the others).
var rstreamSizes = []int{64, 4 << 10, 64 << 10, 1 << 20}

// sizeToCount is rstream's iteration (latency) or transfer (bandwidth) count.
func sizeToCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}

func sizeStr(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "m"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "k"
	}
	return strconv.Itoa(n)
}

// defaultPasses is what rstream runs without -I/-C/-S: one connection for
// the latency pass (one transfer per iteration) and a second one for the
// bandwidth pass (one iteration of many transfers).
func defaultPasses() [][]rsTest {
	var lat, bw []rsTest
	for _, s := range rstreamSizes {
		lat = append(lat, rsTest{sizeStr(s) + "_lat", s, 1, sizeToCount(s)})
		bw = append(bw, rsTest{sizeStr(s) + "_bw", s, sizeToCount(s), 1})
	}
	return [][]rsTest{lat, bw}
}

// customPass is rstream -S size -C count -I iters: one connection, one test.
func customPass(size, count, iters int) [][]rsTest {
	return [][]rsTest{{{"custom", size, count, iters}}}
}

func (ts rsTest) args() []string {
	return []string{"-S", strconv.Itoa(ts.size), "-C", strconv.Itoa(ts.count), "-I", strconv.Itoa(ts.iters)}
}

// patTable holds rstream's verify pattern (-T v): the n-th byte a side sends
// over the life of the process is byte(n), sync transfers included.
var patTable = func() []byte {
	b := make([]byte, 256+1<<20)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

// pattern keeps one process's two running counters, like rstream's static
// counters in format_buf and verify_buf.
type pattern struct {
	tx, rx uint64
}

func (p *pattern) next(n int) []byte {
	o := p.tx % 256
	p.tx += uint64(n)
	return patTable[o : o+uint64(n)]
}

func (p *pattern) check(b []byte) error {
	o := p.rx % 256
	want := patTable[o : o+uint64(len(b))]
	if !bytes.Equal(b, want) {
		for i := range b {
			if b[i] != want[i] {
				return fmt.Errorf("data verification failed at stream byte %d: got %#x, want %#x", p.rx+uint64(i), b[i], want[i])
			}
		}
	}
	p.rx += uint64(len(b))
	return nil
}

// xfer moves rstream's transfers over c with the verify pattern, counting
// the bytes received in progress (for tests that act mid-stream).
type xfer struct {
	c        net.Conn
	pat      *pattern
	buf      []byte
	progress *atomic.Int64
}

func newXfer(c net.Conn, pat *pattern) *xfer {
	return &xfer{c: c, pat: pat, buf: make([]byte, 1<<20)}
}

func (x *xfer) send(n int) error {
	for n > 0 {
		k := min(n, 1<<20)
		if _, err := x.c.Write(x.pat.next(k)); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func (x *xfer) recv(n int) error {
	for n > 0 {
		k := min(n, len(x.buf))
		if _, err := io.ReadFull(x.c, x.buf[:k]); err != nil {
			return err
		}
		if err := x.pat.check(x.buf[:k]); err != nil {
			return err
		}
		if x.progress != nil {
			x.progress.Add(int64(k))
		}
		n -= k
	}
	return nil
}

// serve is rstream's server side of one connection's tests: for each test,
// receive the sync and send it back, then for each iteration receive count
// transfers and send count back.
func (x *xfer) serve(tests []rsTest) error {
	for _, ts := range tests {
		if err := x.recv(16); err != nil {
			return fmt.Errorf("%s: sync: %w", ts.name, err)
		}
		if err := x.send(16); err != nil {
			return fmt.Errorf("%s: sync: %w", ts.name, err)
		}
		for i := 0; i < ts.iters; i++ {
			for t := 0; t < ts.count; t++ {
				if err := x.recv(ts.size); err != nil {
					return fmt.Errorf("%s: iteration %d: recv: %w", ts.name, i, err)
				}
			}
			for t := 0; t < ts.count; t++ {
				if err := x.send(ts.size); err != nil {
					return fmt.Errorf("%s: iteration %d: send: %w", ts.name, i, err)
				}
			}
		}
	}
	return nil
}

// run is rstream's client side: the mirror image of serve.
func (x *xfer) run(tests []rsTest) error {
	for _, ts := range tests {
		if err := x.send(16); err != nil {
			return fmt.Errorf("%s: sync: %w", ts.name, err)
		}
		if err := x.recv(16); err != nil {
			return fmt.Errorf("%s: sync: %w", ts.name, err)
		}
		for i := 0; i < ts.iters; i++ {
			for t := 0; t < ts.count; t++ {
				if err := x.send(ts.size); err != nil {
					return fmt.Errorf("%s: iteration %d: send: %w", ts.name, i, err)
				}
			}
			for t := 0; t < ts.count; t++ {
				if err := x.recv(ts.size); err != nil {
					return fmt.Errorf("%s: iteration %d: recv: %w", ts.name, i, err)
				}
			}
		}
	}
	return nil
}

// rstreamResult is one line of rstream's report.
type rstreamResult struct {
	name      string
	gbps      float64
	usPerXfer float64
}

var resultLine = regexp.MustCompile(`(?m)^(\S+)\s+\S+\s+\S+\s+\S+\s+\S+\s+([0-9.]+)s\s+([0-9.]+)\s+([0-9.]+)\s*$`)

// parseRstream returns rstream's result lines and fails on any line that
// reports an error (rstream's exit code ignores failures of single tests).
func parseRstream(out string) (map[string]rstreamResult, error) {
	for _, bad := range []string{"verification failed", "rsend", "rrecv", "rpoll", "raccept", "rconnect", "rlisten", "rbind", "getaddrinfo"} {
		if strings.Contains(out, bad) {
			return nil, fmt.Errorf("rstream reported %q", bad)
		}
	}
	res := map[string]rstreamResult{}
	for _, m := range resultLine.FindAllStringSubmatch(out, -1) {
		gb, _ := strconv.ParseFloat(m[3], 64)
		us, _ := strconv.ParseFloat(m[4], 64)
		res[m[1]] = rstreamResult{m[1], gb, us}
	}
	return res, nil
}
