package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

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
	tcp      bool
	fallback bool
	json     bool
	quiet    bool
	once     bool
}

func parsePerf(args []string, stderr io.Writer) (perfOpts, error) {
	o := perfOpts{}
	fs := flag.NewFlagSet("rnet perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.server, "s", false, "serve perf and ping clients, on [addr] (default :7471)")
	fs.StringVar(&o.client, "c", "", "run the client against `host[:port]`")
	fs.StringVar(&o.from, "from", "", "client: local `IP` to connect from (picks the RDMA device)")
	size := int64(64 << 10)
	fs.Var(byteSize{&size}, "size", "client: bytes per write, such as 64, 4K or 1M (default 64K)")
	fs.DurationVar(&o.duration, "t", 10*time.Second, "client: how long to send")
	fs.Var(byteSize{&o.bytes}, "n", "client: send this many `bytes` (such as 1G) instead of for -t")
	fs.DurationVar(&o.interval, "i", time.Second, "client: progress line interval")
	fs.BoolVar(&o.tcp, "tcp", false, "use TCP instead of RDMA (the baseline)")
	fs.BoolVar(&o.fallback, "fallback", false, "client: fall back to TCP where RDMA cannot be used; server: serve RDMA and TCP on one port")
	fs.BoolVar(&o.json, "json", false, "print the summary as JSON")
	fs.BoolVar(&o.quiet, "q", false, "client: no progress line")
	fs.BoolVar(&o.once, "once", false, "server: exit after serving one client")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return o, err
	}
	o.size = int(min(size, maxSize+1))
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

// PerfResult is the summary of `rnet perf -c`, and its --json form.
type PerfResult struct {
	Test        string      `json:"test"` // "perf"
	Transport   string      `json:"transport"`
	Fallback    string      `json:"fallback,omitempty"` // why TCP, when it fell back from RDMA
	Server      string      `json:"server"`
	Local       string      `json:"local"`
	Size        int         `json:"size"`
	Writes      int64       `json:"writes"`
	Bytes       int64       `json:"bytes"`
	Seconds     float64     `json:"seconds"`
	MBps        float64     `json:"MBps"` // 10^6 bytes per second
	Gbps        float64     `json:"Gbps"`
	CgoPerWrite float64     `json:"cgo_per_write,omitempty"`
	Stats       *rnet.Stats `json:"stats,omitempty"`
}

func runPerf(o perfOpts, stdout, stderr io.Writer) error {
	c, err := dial(o.tcp, o.fallback, o.addr, o.from)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(hello{mode: modePerf, size: uint32(o.size)}.encode()); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	buf := make([]byte, o.size)
	var sent atomic.Int64
	stop := make(chan struct{})
	progressDone := make(chan struct{})
	start := time.Now()
	if o.quiet {
		close(progressDone)
	} else {
		go progress(stderr, &sent, start, o.interval, stop, progressDone)
	}
	cgo0 := verbs.CgoCalls()
	end := start.Add(o.duration)
	var writes int64
	for {
		if o.bytes > 0 {
			left := o.bytes - sent.Load()
			if left <= 0 {
				break
			}
			if left < int64(len(buf)) {
				buf = buf[:left]
			}
		} else if time.Now().After(end) {
			break // a clock read is cheap next to a Write
		}
		n, err := c.Write(buf)
		sent.Add(int64(n))
		writes++
		if err != nil {
			close(stop)
			<-progressDone
			return fmt.Errorf("write: %w", err)
		}
	}
	cgo := verbs.CgoCalls() - cgo0
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	got, err := readAck(c)
	elapsed := time.Since(start)
	close(stop)
	<-progressDone
	if err != nil {
		return fmt.Errorf("waiting for the server's count: %w", err)
	}
	if got != uint64(sent.Load()) {
		return fmt.Errorf("server received %d bytes, sent %d", got, sent.Load())
	}
	r := PerfResult{
		Test: "perf", Server: c.RemoteAddr().String(), Local: c.LocalAddr().String(),
		Size: o.size, Writes: writes, Bytes: sent.Load(), Seconds: elapsed.Seconds(),
	}
	r.Transport, r.Fallback = transportOf(c, o.tcp)
	r.MBps = float64(r.Bytes) / r.Seconds / 1e6
	r.Gbps = r.MBps * 8 / 1000
	if rc, ok := c.(*rnet.Conn); ok {
		st := rc.Stats()
		r.Stats = &st
		r.CgoPerWrite = float64(cgo) / float64(max(writes, 1))
	}
	return printPerf(stdout, o.json, r)
}

func printPerf(w io.Writer, asJSON bool, r PerfResult) error {
	if asJSON {
		return json.NewEncoder(w).Encode(r)
	}
	fmt.Fprintf(w, "%s %s -> %s: %d writes of %d B, %s in %.2f s = %.1f MB/s (%.3f Gb/s)",
		withFallback(r.Transport, r.Fallback), r.Local, r.Server, r.Writes, r.Size, human(r.Bytes), r.Seconds, r.MBps, r.Gbps)
	if r.Stats != nil {
		fmt.Fprintf(w, ", %.2f cgo calls/write; waits: %d spun, %d parked", r.CgoPerWrite, r.Stats.Spins, r.Stats.Parks)
	}
	fmt.Fprintln(w)
	return nil
}

// progress prints a live line every interval: on a terminal it rewrites one
// line, elsewhere it prints one line per interval.
func progress(w io.Writer, sent *atomic.Int64, start time.Time, every time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tty := isTerminal(w)
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastT := int64(0), start
	for {
		select {
		case <-stop:
			if tty {
				fmt.Fprint(w, "\r\033[K")
			}
			return
		case now := <-t.C:
			n := sent.Load()
			rate := float64(n-last) / now.Sub(lastT).Seconds() / 1e6
			avg := float64(n) / now.Sub(start).Seconds() / 1e6
			line := fmt.Sprintf("[%6.1fs] %10s sent  %8.1f MB/s now  %8.1f MB/s average", now.Sub(start).Seconds(), human(n), rate, avg)
			if tty {
				fmt.Fprint(w, "\r\033[K"+line)
			} else {
				fmt.Fprintln(w, line)
			}
			last, lastT = n, now
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// runServer serves perf and ping clients concurrently, each in its own
// goroutine; with -once it serves the first client alone and returns.
func runServer(o perfOpts, stdout, stderr io.Writer) error {
	ln, err := listen(o.tcp, o.fallback, o.addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	// With --json, standard output carries the results alone, one JSON
	// object per client, so that it can go straight to a parser.
	banner := stdout
	if o.json {
		banner = stderr
	}
	name := netName(o.tcp)
	if o.fallback && !o.tcp {
		name = "rdma and tcp"
	}
	fmt.Fprintf(banner, "rnet perf: listening on %s (%s)\n", ln.Addr(), name)
	if f, ok := banner.(*os.File); ok {
		f.Sync()
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		if o.once {
			return serveConn(c, o, stdout)
		}
		go func() {
			if err := serveConn(c, o, stdout); err != nil {
				fmt.Fprintf(stderr, "rnet perf: client %s: %v\n", c.RemoteAddr(), err)
			}
		}()
	}
}

// ServerResult is what the server prints per client.
type ServerResult struct {
	Test      string  `json:"test"`
	Transport string  `json:"transport"`
	Fallback  string  `json:"fallback,omitempty"`
	Client    string  `json:"client"`
	Size      int     `json:"size"`
	Bytes     int64   `json:"bytes"`
	Messages  int64   `json:"messages"`
	Reads     int64   `json:"reads"` // perf: Read calls, so that Stats can be put per call
	Seconds   float64 `json:"seconds"`
	// Cgo is how many crossings into C the server process made while it
	// served this client (RDMA only): exact when it serves one at a time.
	Cgo uint64 `json:"cgo,omitempty"`
	// Stats is the connection's counters at the end (RDMA only): among
	// them how often the server's calls waited by spinning or parking.
	Stats *rnet.Stats `json:"stats,omitempty"`
}

func serveConn(c net.Conn, o perfOpts, stdout io.Writer) error {
	defer c.Close()
	hb := make([]byte, helloLen)
	if _, err := io.ReadFull(c, hb); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	h, err := decodeHello(hb)
	if err != nil {
		return err
	}
	start, cgo0 := time.Now(), verbs.CgoCalls()
	res := ServerResult{Client: c.RemoteAddr().String(), Size: int(h.size)}
	res.Transport, res.Fallback = transportOf(c, o.tcp)
	switch h.mode {
	case modePerf:
		res.Test = "perf"
		buf := make([]byte, max(int(h.size), 256<<10))
		for {
			n, err := c.Read(buf)
			res.Reads++
			res.Bytes += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
		}
		var ack [8]byte
		binary.BigEndian.PutUint64(ack[:], uint64(res.Bytes))
		if _, err := c.Write(ack[:]); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
	case modePing:
		res.Test = "ping"
		buf := make([]byte, h.size)
		for {
			if _, err := io.ReadFull(c, buf); err == io.EOF {
				break
			} else if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			if _, err := c.Write(buf); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			res.Messages++
			res.Bytes += int64(h.size)
		}
	}
	res.Seconds = time.Since(start).Seconds()
	if rc, ok := c.(*rnet.Conn); ok {
		st := rc.Stats()
		res.Stats = &st
		res.Cgo = verbs.CgoCalls() - cgo0
	}
	if o.json {
		return json.NewEncoder(stdout).Encode(res)
	}
	line := fmt.Sprintf("%s %s from %s: %d B messages, %s in %.2f s", withFallback(res.Transport, res.Fallback), res.Test, res.Client, res.Size, human(res.Bytes), res.Seconds)
	if res.Stats != nil {
		if res.Reads > 0 {
			line += fmt.Sprintf("; %.2f cgo calls/read", float64(res.Cgo)/float64(res.Reads))
		}
		line += fmt.Sprintf("; waits: %d spun, %d parked", res.Stats.Spins, res.Stats.Parks)
	}
	_, err = fmt.Fprintln(stdout, line)
	return err
}
