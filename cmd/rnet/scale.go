package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/internal/bytesize"
	"github.com/rnet-dev/rnet/rnet"
)

// rnet scale: one server process and one client process; the client opens
// many connections, echoes a checksummed message on each, holds them idle
// while the server measures what they cost it, streams on a few of them,
// and prints the SCALE line. The two coordinate over a TCP control
// connection on the server's port + 1.

type scaleOpts struct {
	server    bool
	addr      string // RDMA listen address (-s) or server (-c)
	ctlAddr   string // the control connection's TCP address
	client    string
	device    string // -d: bind to this device's address
	from      string
	conns     int
	parallel  int
	busy      int
	busyBytes int64
	tcp       bool
	json      bool
}

const (
	scaleMsgLen   = 64
	scaleMagic    = "RSC1"
	busyWriteSize = 64 << 10
	// The most one busy header may announce: a bound on what a confused
	// or hostile client can make the server wait for.
	maxBusyBytes = 1 << 40
	// How long a connection's echo may take once it is open.
	scaleEchoLimit = time.Minute
	// How long a busy connection's stream may take, at the least rate
	// worth reporting (a few KB/s each in an emulated guest).
	scaleBusyLimit = 15 * time.Minute
)

var scaleCommand = command{
	name:     "scale",
	synopsis: "rnet scale -s [addr] | -c host[:port] [flags]",
	summary:  "many connections at once: what each costs the server",
	about: `rnet scale -s serves one scale client (on addr, default :7471; control over TCP on
the port + 1). rnet scale -c opens -conns connections to it, echoes a checksummed
message on each, holds them idle while the server measures its pinned bytes, fds,
threads and CQs, streams -busy-bytes on -busy of them, and prints a SCALE line.
`,
	flags: func() *flag.FlagSet { return scaleFlags(&scaleOpts{}) },
	run: func(args []string, stdout, stderr io.Writer, where *target) error {
		o, err := parseScale(args)
		if err != nil {
			return err
		}
		where.addr, where.transport = o.addr, netName(o.tcp)
		if o.server {
			return runScaleServer(o, stdout, stderr)
		}
		return runScaleClient(o, stdout, stderr)
	},
}

// scaleFlags defines scale's flags on a new FlagSet that fills o, with
// their defaults.
func scaleFlags(o *scaleOpts) *flag.FlagSet {
	fs := newFlagSet("scale")
	fs.BoolVar(&o.server, "s", false, "serve one scale client, on [addr] (default :7471; control on port+1, TCP)")
	fs.StringVar(&o.client, "c", "", "run the client against `host[:port]`")
	fs.StringVar(&o.device, "d", "", "the RDMA `device` to use, by name (rxe0, mlx5_0): bind to its address")
	fs.StringVar(&o.from, "from", "", "client: local `IP` to connect from (picks the RDMA device)")
	fs.IntVar(&o.conns, "conns", 10000, "client: connections to open")
	fs.IntVar(&o.parallel, "parallel", 16, "client: dials in flight at once")
	fs.IntVar(&o.busy, "busy", 100, "client: connections that stream after the idle measurement")
	o.busyBytes = 4 << 20
	fs.Var(byteSize[int64]{&o.busyBytes}, "busy-bytes", "client: `bytes` each busy connection streams, in 64 KiB writes, such as 4M")
	fs.BoolVar(&o.tcp, "tcp", false, "use TCP instead of RDMA (the baseline)")
	fs.BoolVar(&o.json, "json", false, "client: print the result as JSON")
	return fs
}

func parseScale(args []string) (scaleOpts, error) {
	o := scaleOpts{}
	pos, err := parseInterleaved(scaleFlags(&o), args)
	if err != nil {
		return o, err
	}
	switch {
	case o.server && o.client != "":
		return o, usageErrorf("-s and -c exclude each other")
	case !o.server && o.client == "":
		return o, usageErrorf("pass -s [addr] to serve or -c host to measure")
	case len(pos) > 1 || (len(pos) == 1 && !o.server):
		return o, usageErrorf("unexpected arguments %q", pos)
	case o.device != "" && o.from != "":
		return o, usageError{deviceAndFrom}
	case o.conns <= 0 || o.parallel <= 0 || o.busy < 0:
		return o, usageErrorf("-conns and -parallel must be positive, -busy at least 0")
	case o.busyBytes <= 0 || o.busyBytes > maxBusyBytes:
		return o, usageErrorf("-busy-bytes must be in 1..%d (1T)", int64(maxBusyBytes))
	}
	target := o.client
	if o.server && len(pos) == 1 {
		target = pos[0]
	}
	if o.addr, err = hostPort(target); err != nil {
		return o, usageError{err.Error()}
	}
	if o.ctlAddr, err = controlAddr(o.addr); err != nil {
		return o, usageError{err.Error()}
	}
	return o, nil
}

// controlAddr is the TCP address of the control connection: the RDMA
// address's port + 1, apart from it because an iWARP listener takes its
// port in the TCP port space too.
func controlAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p >= 65535 {
		return "", fmt.Errorf("port %q: the control connection needs port+1 free and valid", port)
	}
	if p == 0 {
		return "", errors.New("port 0: the client must know the server's port")
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1)), nil
}

// The control connection carries one JSON object per line each way: a
// request from the client, the server's reply.
type scaleRequest struct {
	Op     string `json:"op"` // "begin", "measure", "done"
	BootID string `json:"boot_id,omitempty"`
	Conns  int    `json:"conns,omitempty"` // measure: how many the client holds
}

type scaleReply struct {
	Error   string         `json:"error,omitempty"`
	Figures *serverFigures `json:"figures,omitempty"`
}

// echoMessage is connection i's message: a magic, the index, bytes drawn
// from the index, and a CRC-32 of all that, so that the server can check
// what arrived and the client can check what came back.
func echoMessage(i int) []byte {
	m := make([]byte, scaleMsgLen)
	copy(m, scaleMagic)
	binary.BigEndian.PutUint32(m[4:], uint32(i))
	r := rand.New(rand.NewPCG(uint64(i), 0x5ca1e))
	for j := 8; j < scaleMsgLen-4; j++ {
		m[j] = byte(r.Uint32())
	}
	binary.BigEndian.PutUint32(m[scaleMsgLen-4:], crc32.ChecksumIEEE(m[:scaleMsgLen-4]))
	return m
}

// checkEchoMessage says what is wrong with a message, if anything.
func checkEchoMessage(m []byte) error {
	if len(m) != scaleMsgLen || string(m[:4]) != scaleMagic {
		return errors.New("not a scale message")
	}
	if got, want := binary.BigEndian.Uint32(m[scaleMsgLen-4:]), crc32.ChecksumIEEE(m[:scaleMsgLen-4]); got != want {
		return fmt.Errorf("checksum %08x, want %08x: the bytes were damaged on the way", got, want)
	}
	return nil
}

// limitHint names the limit to raise for the errors that mean one was hit.
func limitHint(err error) string {
	var rej *rnet.RejectError
	switch {
	case errors.Is(err, syscall.EMFILE):
		return " (out of file descriptors: raise RLIMIT_NOFILE, `ulimit -n`)"
	case errors.Is(err, syscall.ENFILE):
		return " (the machine is out of file descriptors: raise fs.file-max)"
	case errors.Is(err, rnet.ErrLockedMemory):
		return " (raise RLIMIT_MEMLOCK: `ulimit -l unlimited`)"
	case errors.Is(err, syscall.ENOMEM):
		return " (out of memory for rings and queues: give the machine more memory (in the lab RNET_VM_MEM, or BENCH_SCALE_VM_MEM for make bench-scale) or raise RLIMIT_MEMLOCK)"
	case errors.As(err, &rej), errors.Is(err, syscall.ECONNREFUSED):
		return " (the server refused it: its stderr names the step and the limit)"
	}
	return ""
}

func runScaleClient(o scaleOpts, stdout, stderr io.Writer) error {
	if o.device != "" {
		// A device that is not there fails the run before the server
		// is asked to start it.
		if _, err := rnet.DeviceAddrs(o.device); err != nil {
			return explain(err, o.addr)
		}
	}
	ctl, err := dialControl(o.ctlAddr, time.Minute)
	if err != nil {
		return err
	}
	defer ctl.Close()
	// The server measures for as long as it needs: a reply has no deadline.
	enc, dec := json.NewEncoder(ctl), newControlReader(ctl, 0, 0)
	call := func(req scaleRequest) (scaleReply, error) {
		var rep scaleReply
		if err := enc.Encode(req); err != nil {
			return rep, fmt.Errorf("control connection to %s, %s: %w", o.ctlAddr, req.Op, err)
		}
		if err := dec.read(&rep, false); err != nil {
			return rep, fmt.Errorf("control connection to %s, %s: the server did not answer (see its stderr): %w", o.ctlAddr, req.Op, err)
		}
		if rep.Error != "" {
			return rep, fmt.Errorf("server, %s: %s", req.Op, rep.Error)
		}
		return rep, nil
	}
	if _, err := call(scaleRequest{Op: "begin", BootID: bootID()}); err != nil {
		return err
	}
	res := ScaleResult{Transport: netName(o.tcp), Conns: o.conns}
	start := time.Now()
	conns, openErr := openScaleConns(o, stderr)
	res.OpenSecs = time.Since(start).Seconds()
	held := nonNil(conns)
	res.OK = len(held)
	defer closeAll(held, o.parallel)
	if res.OK == 0 {
		return openErr
	}
	rep, err := call(scaleRequest{Op: "measure", Conns: res.OK})
	if err != nil {
		return errors.Join(openErr, err)
	}
	res.fill(*rep.Figures)
	var busyErr error
	busy := spread(held, o.busy)
	res.BusyConns, res.BusyBytes = len(busy), o.busyBytes
	if len(busy) > 0 {
		fmt.Fprintf(stderr, "rnet scale: %d connections stream %s each\n", len(busy), bytesize.Format(uint64(o.busyBytes)))
		secs, err := streamBusy(busy, o.busyBytes)
		if err != nil {
			// The line still says what the idle connections cost.
			busyErr = err
		} else {
			res.BusyMBps = float64(int64(len(busy))*o.busyBytes) / secs / 1e6
		}
	}
	t := time.Now()
	closeAll(held, o.parallel)
	res.CloseSecs = time.Since(t).Seconds()
	if _, err := call(scaleRequest{Op: "done"}); err != nil {
		return errors.Join(openErr, busyErr, err)
	}
	if o.json {
		if err := json.NewEncoder(stdout).Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(stdout, res.scaleLine())
		fmt.Fprintln(stdout, res.memLine())
	}
	return errors.Join(openErr, busyErr)
}

// dialControl connects to the server's control port, retrying while the
// server is still starting.
func dialControl(addr string, limit time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("control connection to %s (TCP, the RDMA port + 1): %w; start rnet scale -s there first", addr, err)
		}
		time.Sleep(200 * time.Millisecond) // waiting for a server to start listening
	}
}

// openScaleConns opens o.conns connections, o.parallel at a time, and
// echoes each one's message. It stops opening at the first failure, whose
// error it returns; conns[i] is nil for every connection not held.
func openScaleConns(o scaleOpts, stderr io.Writer) ([]net.Conn, error) {
	conns := make([]net.Conn, o.conns)
	var next, opened atomic.Int64
	var stop atomic.Bool
	var errOnce sync.Once
	var firstErr error
	done := make(chan struct{})
	progressDone := make(chan struct{})
	go openProgress(stderr, o.conns, &opened, done, progressDone)
	var wg sync.WaitGroup
	for range min(o.parallel, o.conns) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				if i >= o.conns {
					return
				}
				c, err := openOne(o, i)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					stop.Store(true)
					return
				}
				conns[i] = c
				opened.Add(1)
			}
		}()
	}
	wg.Wait()
	close(done)
	<-progressDone
	return conns, firstErr
}

// openOne dials connection i and checks its echo.
func openOne(o scaleOpts, i int) (net.Conn, error) {
	fail := func(step string, err error) error {
		return fmt.Errorf("connection %d of %d, %s: %w%s", i, o.conns, step, err, limitHint(err))
	}
	c, err := dial(o.tcp, false, o.addr, o.from, o.device, rdmaConfig())
	if err != nil {
		return nil, fail("dial", err)
	}
	msg := echoMessage(i)
	back := make([]byte, scaleMsgLen)
	c.SetDeadline(time.Now().Add(scaleEchoLimit))
	if _, err := c.Write(msg); err != nil {
		c.Close()
		return nil, fail("echo write", err)
	}
	if _, err := io.ReadFull(c, back); err != nil {
		c.Close()
		return nil, fail("echo read", err)
	}
	c.SetDeadline(time.Time{})
	if string(back) != string(msg) {
		c.Close()
		return nil, fail("echo check", fmt.Errorf("the echo differs from what was sent (%v)", checkEchoMessage(back)))
	}
	return c, nil
}

// openProgress reports on stderr every 10% of the connections, or every 5 s
// when they come slower than that.
func openProgress(w io.Writer, total int, opened *atomic.Int64, done <-chan struct{}, finished chan<- struct{}) {
	defer close(finished)
	start := time.Now()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	step := max(total/10, 1)
	nextMark, lastPrint := step, start
	report := func(n int64) {
		secs := time.Since(start).Seconds()
		fmt.Fprintf(w, "rnet scale: opened %d of %d connections (%d%%) in %.1f s, %.0f/s\n", n, total, n*100/int64(total), secs, float64(n)/secs)
		lastPrint = time.Now()
	}
	for {
		select {
		case <-done:
			report(opened.Load())
			return
		case now := <-t.C:
			n := opened.Load()
			if n >= int64(nextMark) || now.Sub(lastPrint) >= 5*time.Second {
				report(n)
				for int64(nextMark) <= n {
					nextMark += step
				}
			}
		}
	}
}

func nonNil(conns []net.Conn) []net.Conn {
	var held []net.Conn
	for _, c := range conns {
		if c != nil {
			held = append(held, c)
		}
	}
	return held
}

// spread picks n connections evenly across held, so that busy ones sit
// among idle ones.
func spread(held []net.Conn, n int) []net.Conn {
	n = min(n, len(held))
	picked := make([]net.Conn, n)
	for k := range n {
		picked[k] = held[k*len(held)/n]
	}
	return picked
}

// streamBusy makes every connection write a header with the byte count,
// then that many bytes in 64 KiB writes, and wait for the server's count;
// it returns the seconds from the first write to the last count, and an
// error naming the first failure and how many failed.
func streamBusy(busy []net.Conn, bytes int64) (float64, error) {
	start := time.Now()
	errs := make([]error, len(busy))
	var wg sync.WaitGroup
	for k, c := range busy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = streamOne(c, bytes)
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	failed, first := 0, -1
	for k, err := range errs {
		if err != nil {
			failed++
			if first < 0 {
				first = k
			}
		}
	}
	if failed == 0 {
		return secs, nil
	}
	return secs, fmt.Errorf("%d of %d busy connections failed; the first, busy connection %d (local %s): %w",
		failed, len(busy), first, busy[first].LocalAddr(), errs[first])
}

func streamOne(c net.Conn, n int64) error {
	// A server that stops reading fails the run rather than hanging it.
	c.SetDeadline(time.Now().Add(scaleBusyLimit))
	defer c.SetDeadline(time.Time{})
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(n))
	if _, err := c.Write(hdr[:]); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	buf := make([]byte, busyWriteSize)
	for left := n; left > 0; {
		k := min(left, int64(len(buf)))
		if _, err := c.Write(buf[:k]); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		left -= k
	}
	got, err := readAck(c)
	if err != nil {
		return fmt.Errorf("waiting for the server's count: %w", err)
	}
	if got != uint64(n) {
		return fmt.Errorf("server counted %d bytes, sent %d", got, n)
	}
	return nil
}

// closeAll closes every connection, parallel at a time; it is idempotent,
// as Close is.
func closeAll(conns []net.Conn, parallel int) {
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for _, c := range conns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c.Close()
		}()
	}
	wg.Wait()
}
