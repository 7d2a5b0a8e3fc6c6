package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/rnet"
)

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

// runServer serves perf and ping clients concurrently, each connection in
// its own goroutine; with -once it returns after the first test.
func runServer(o perfOpts, stdout, stderr io.Writer) error {
	ln, err := listen(o.tcp, o.fallback, o.addr, o.rdma.config())
	if err != nil {
		return err
	}
	defer ln.Close()
	// With --json, standard output carries the results alone, one JSON
	// object per test, so that it can go straight to a parser.
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
	s := &perfServer{o: o, stdout: stdout, stderr: stderr, tests: newTestGroups(), done: make(chan error, 1), conns: map[net.Conn]bool{},
		pings: newByteBudget(pingBudget)}
	defer s.closeAll()
	accepted := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				accepted <- fmt.Errorf("accept: %w", err)
				return
			}
			if !s.track(c) {
				return
			}
			go func() {
				defer s.wg.Done()
				s.serve(c)
			}()
		}
	}()
	select {
	case err := <-accepted:
		return err
	case err := <-s.done:
		return err // -once: the first test is over
	}
}

// perfServer is a running `rnet perf -s`.
type perfServer struct {
	o              perfOpts
	stdout, stderr io.Writer
	tests          *testGroups
	done           chan error // -once: the first test's outcome
	wg             sync.WaitGroup
	mu             sync.Mutex
	outMu          sync.Mutex // one result's lines together
	conns          map[net.Conn]bool
	closed         bool
	pings          *byteBudget // for the messages ping clients have the server echo
}

// track counts a new connection in, unless the server is closing; the
// count is taken under the lock so that closeAll's Wait sees it.
func (s *perfServer) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = true
	s.wg.Add(1)
	return true
}

// closeAll ends the connections still served (-once's other clients) and
// waits for their goroutines.
func (s *perfServer) closeAll() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.tests.stop()
}

func (s *perfServer) serve(c net.Conn) {
	var group string
	var stream int
	res, err := serveConn(c, s.o, s.pings, func(h hello) error {
		if h.streams == 1 {
			return nil
		}
		key := groupKey(c, h.test)
		if err := s.tests.join(key, int(h.streams)); err != nil {
			return err
		}
		group, stream = key, int(h.stream)
		return nil
	})
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	if group != "" {
		if err != nil {
			res.Error = err.Error()
		}
		res.Stream = stream
		s.tests.finish(group, res, s.report)
		return
	}
	if err != nil {
		fmt.Fprintf(s.stderr, "rnet perf: client %s: %v\n", c.RemoteAddr(), err)
		s.finished(err)
		return
	}
	s.report(res)
}

// report prints a finished test's result.
func (s *perfServer) report(r ServerResult) {
	s.outMu.Lock()
	err := printServerResult(s.stdout, s.o.json, r)
	s.outMu.Unlock()
	if err == nil && r.Error != "" {
		err = errors.New(r.Error)
	}
	s.finished(err)
}

func (s *perfServer) finished(err error) {
	if s.o.once {
		select {
		case s.done <- err:
		default:
		}
	}
}

// serveConn serves one connection; joined learns of its hello first, and
// an error from it ends the connection. A ping client's messages are held
// in memory taken from pings.
func serveConn(c net.Conn, o perfOpts, pings *byteBudget, joined func(hello) error) (ServerResult, error) {
	res := ServerResult{Client: c.RemoteAddr().String(), start: time.Now()}
	res.Transport, res.Fallback = transportOf(c, o.tcp)
	hb := make([]byte, helloLen)
	if _, err := io.ReadFull(c, hb); err != nil {
		return res, fmt.Errorf("hello: %w", err)
	}
	h, err := decodeHello(hb)
	if err != nil {
		return res, err
	}
	if h.mode == modePerfReverse {
		if _, err := io.ReadFull(c, hb); err != nil {
			return res, fmt.Errorf("hello: %w", err)
		}
		if err := decodeHelloExt(&h, hb); err != nil {
			return res, err
		}
	}
	if err := joined(h); err != nil {
		return res, err
	}
	start, cgo0 := time.Now(), verbs.CgoCalls()
	res.start, res.Size = start, int(h.size)
	switch h.mode {
	case modePerf:
		res.Test = "perf"
		err = receiveAll(c, &res)
	case modePerfReverse:
		res.Test, res.Reverse = "perf", true
		err = sendAll(c, h, &res)
	case modePing:
		res.Test = "ping"
		err = echo(c, pings, &res)
	}
	res.end = time.Now()
	res.Seconds = res.end.Sub(start).Seconds()
	if rc, ok := c.(*rnet.Conn); ok {
		st := rc.Stats()
		res.Stats = &st
		res.Cgo = verbs.CgoCalls() - cgo0
	}
	return res, err
}

// receiveAll counts a perf client's bytes until it half-closes, then
// tells it the count. Its reads take at most maxReadBuffer at a time,
// whatever size the client writes, so that a client cannot make the server
// hold 64 MiB per connection.
func receiveAll(c net.Conn, res *ServerResult) error {
	buf := make([]byte, min(max(res.Size, 256<<10), maxReadBuffer))
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
	if err := writeAck(c, res.Bytes); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	return nil
}

// sendAll sends a -R client what its hello asks, half-closes, and checks
// the client's count.
func sendAll(c net.Conn, h hello, res *ServerResult) error {
	buf := zeroes()[:h.size]
	end := time.Now().Add(h.duration)
	for {
		if h.bytes > 0 {
			left := h.bytes - res.Bytes
			if left <= 0 {
				break
			}
			if left < int64(len(buf)) {
				buf = buf[:left]
			}
		} else if time.Now().After(end) {
			break
		}
		n, err := c.Write(buf)
		res.Writes++
		res.Bytes += int64(n)
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return fmt.Errorf("a %T cannot half-close, which -R needs to end the stream", c)
	}
	if err := cw.CloseWrite(); err != nil {
		return fmt.Errorf("closing the stream: %w", err)
	}
	got, err := readAck(c)
	if err != nil {
		return fmt.Errorf("waiting for the client's count: %w", err)
	}
	if got != uint64(res.Bytes) {
		return fmt.Errorf("client received %d bytes, sent %d", got, res.Bytes)
	}
	return nil
}

// echo returns a ping client's messages until it closes. A message is read
// whole before it is returned (a client writes it whole before it reads),
// so its memory comes from pings, and a test that would take more than is
// left is refused.
func echo(c net.Conn, pings *byteBudget, res *ServerResult) error {
	if !pings.take(res.Size) {
		return fmt.Errorf("refused: ping messages of %s would pass the %s this server holds for the ping clients it serves at once; try again when fewer are running, or with a smaller -size",
			human(int64(res.Size)), human(int64(pings.size)))
	}
	defer pings.give(res.Size)
	buf := make([]byte, res.Size)
	for {
		if _, err := io.ReadFull(c, buf); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		res.Messages++
		res.Bytes += int64(res.Size)
	}
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
	line := fmt.Sprintf("%s%s %s from %s: %d B messages, %s in %.2f s", prefix, withFallback(res.Transport, res.Fallback), test, res.Client, res.Size, human(res.Bytes), res.Seconds)
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

// What the server holds for its clients at most: per perf connection its
// read buffer, and for all ping clients together their messages. A -R
// client's writes all come from one buffer of zeroes.
const (
	maxReadBuffer = 1 << 20
	pingBudget    = 256 << 20
)

// zeroes is what -R streams send: one buffer of maxSize bytes that they all
// share, made on the first -R test.
var zeroes = sync.OnceValue(func() []byte { return make([]byte, maxSize) })

// byteBudget is memory that connections take from and give back.
type byteBudget struct {
	size int
	mu   sync.Mutex
	left int
}

func newByteBudget(size int) *byteBudget { return &byteBudget{size: size, left: size} }

// take takes n bytes if that many are left.
func (b *byteBudget) take(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.left {
		return false
	}
	b.left -= n
	return true
}

func (b *byteBudget) give(n int) {
	b.mu.Lock()
	b.left += n
	b.mu.Unlock()
}
