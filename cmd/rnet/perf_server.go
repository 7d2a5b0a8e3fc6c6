package main

import (
	"errors"
	"expvar"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/bytesize"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/rnet"
)

// runServer serves perf and ping clients concurrently, each connection in
// its own goroutine; with -once it returns after the first test.
func runServer(o perfOpts, stdout, stderr io.Writer) error {
	ln, over, err := listen(o.tcp, o.fallback, o.addr, o.device, o.rdma.config())
	if err != nil {
		return err
	}
	// With --json, standard output carries the results alone, one JSON
	// object per test, so that it can go straight to a parser.
	banner := stdout
	if o.json {
		banner = stderr
	}
	fmt.Fprintf(banner, "rnet perf: listening on %s (%s)\n", ln.Addr(), over)
	if o.metrics != "" {
		ml, err := net.Listen("tcp", o.metrics)
		if err != nil {
			ln.Close()
			return fmt.Errorf("-metrics: %w", err)
		}
		defer ml.Close()
		go http.Serve(ml, expvar.Handler())
		fmt.Fprintf(banner, "rnet perf: metrics on http://%s/debug/vars\n", ml.Addr())
	}
	if f, ok := banner.(*os.File); ok {
		f.Sync()
	}
	return newPerfServer(o, stdout, stderr).run(ln)
}

// perfServer is a running `rnet perf -s`.
type perfServer struct {
	o              perfOpts
	stdout, stderr io.Writer
	tests          *testGroups
	done           chan error // -once: the first test's outcome
	wg             sync.WaitGroup
	outMu          sync.Mutex // one result's lines together
	refusals       refusalLog
	buffered       *byteBudget // read buffers and the messages ping clients have the server echo
	pinned         *byteBudget // the rings of the RDMA connections served, at their maximum
	// served, if set, is called once a connection's holdings are given
	// back (tests wait on it).
	served func()

	mu     sync.Mutex
	conns  map[net.Conn]int64 // served connections and the ring bytes each may pin; guarded by mu
	closed bool               // guarded by mu
}

func newPerfServer(o perfOpts, stdout, stderr io.Writer) *perfServer {
	s := &perfServer{o: o, stdout: stdout, stderr: stderr, done: make(chan error, 1), conns: map[net.Conn]int64{},
		refusals: refusalLog{w: stderr}, buffered: newByteBudget(o.limits.maxBuffered), pinned: newByteBudget(o.limits.maxPinned)}
	s.tests = newTestGroups(o.limits.helloTimeout, s.report)
	return s
}

// run serves ln's clients until Accept fails or, with -once, the first
// test is over; it closes ln and every connection still served.
func (s *perfServer) run(ln net.Listener) error {
	defer ln.Close()
	defer s.closeAll()
	accepted := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				accepted <- fmt.Errorf("accept: %w", err)
				return
			}
			admitted, closing := s.admit(c)
			if closing {
				return
			}
			if admitted {
				go func() {
					defer s.wg.Done()
					s.serve(c)
				}()
			}
		}
	}()
	select {
	case err := <-accepted:
		return err
	case err := <-s.done:
		return err // -once: the first test is over
	}
}

// admit counts a new connection in, or closes it when the server is
// closing or a cap would be passed. The count is taken under the lock so
// that closeAll's Wait sees it.
func (s *perfServer) admit(c net.Conn) (admitted, closing bool) {
	var pinned int64
	if rc, ok := c.(*rnet.Conn); ok {
		pinned = pinnedMax(rc.Config())
	}
	s.mu.Lock()
	var why string
	switch {
	case s.closed:
		closing = true
	case len(s.conns) >= s.o.limits.maxConns:
		why = fmt.Sprintf("%d connections are open, the most this server serves at once (-max-conns)", len(s.conns))
	case !s.pinned.take(pinned):
		why = fmt.Sprintf("its rings may pin %s, and the RDMA connections served now may pin %s of the %s they may pin together (-max-pinned)",
			bytesize.Format(uint64(pinned)), bytesize.Format(uint64(s.pinned.held())), bytesize.Format(uint64(s.pinned.size)))
	default:
		s.conns[c] = pinned
		s.wg.Add(1)
		admitted = true
	}
	s.mu.Unlock()
	if why != "" {
		s.refusals.refused(c.RemoteAddr(), why)
	}
	if !admitted {
		c.Close()
	}
	return admitted, closing
}

// release gives back what an admitted connection held.
func (s *perfServer) release(c net.Conn) {
	s.mu.Lock()
	pinned := s.conns[c]
	delete(s.conns, c)
	s.mu.Unlock()
	s.pinned.give(pinned)
	if s.served != nil {
		s.served()
	}
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
	defer s.release(c) // after the result or error is out
	var test *testGroup
	var stream int
	guard := newConnGuard(c, s.o.limits)
	res, err := serveConn(c, guard, s.o, s.buffered, func(h hello) error {
		if h.streams == 1 {
			return nil
		}
		t, err := s.tests.join(groupKey(c, h.test), int(h.streams), guard.drop)
		if err != nil {
			return err
		}
		test, stream = t, int(h.stream)
		return nil
	})
	guard.stop()
	c.Close()
	if test != nil {
		if err != nil {
			res.Error = err.Error()
		}
		res.Stream = stream
		s.tests.finish(test, res)
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
// an error from it ends the connection. guard drops the connection if the
// client stalls it. Read buffers and a ping client's messages are held in
// memory taken from buffered.
func serveConn(c net.Conn, guard *connGuard, o perfOpts, buffered *byteBudget, joined func(hello) error) (ServerResult, error) {
	res := ServerResult{Client: c.RemoteAddr().String(), start: time.Now()}
	res.Transport, res.Fallback = transportOf(c, o.tcp)
	rw := guardedConn{c, guard}
	h, err := readHello(rw)
	if err != nil {
		return res, guard.cause(err)
	}
	if err := joined(h); err != nil {
		return res, err
	}
	start, cgo0 := time.Now(), verbs.CgoCalls()
	res.start, res.Size = start, int(h.size)
	switch h.mode {
	case modePerf:
		res.Test = "perf"
		err = receiveAll(rw, guard, buffered, &res)
	case modePerfReverse:
		res.Test, res.Reverse = "perf", true
		guard.begin()
		err = sendAll(rw, c, h, &res)
	case modePing:
		res.Test = "ping"
		err = echo(rw, guard, buffered, &res)
	}
	res.end = time.Now()
	res.Seconds = res.end.Sub(start).Seconds()
	if rc, ok := c.(*rnet.Conn); ok {
		st := rc.Stats()
		res.Stats = &st
		res.Cgo = verbs.CgoCalls() - cgo0
	}
	return res, guard.cause(err)
}

func readHello(c net.Conn) (hello, error) {
	hb := make([]byte, helloLen)
	if _, err := io.ReadFull(c, hb); err != nil {
		return hello{}, fmt.Errorf("hello: %w", err)
	}
	h, err := decodeHello(hb)
	if err != nil {
		return h, err
	}
	if h.mode == modePerfReverse {
		if _, err := io.ReadFull(c, hb); err != nil {
			return h, fmt.Errorf("hello: %w", err)
		}
		if err := decodeHelloExt(&h, hb); err != nil {
			return h, err
		}
	}
	return h, nil
}

// receiveAll counts a perf client's bytes until it half-closes, then
// tells it the count. Its reads take at most maxReadBuffer at a time,
// whatever size the client writes, so that a client cannot make the server
// hold 64 MiB per connection, and the buffer is taken from buffered only
// once the client's first byte has come.
func receiveAll(c net.Conn, guard *connGuard, buffered *byteBudget, res *ServerResult) error {
	var first [1]byte
	n, err := c.Read(first[:])
	guard.begin()
	res.Reads++
	res.Bytes += int64(n)
	if err == nil {
		size := int64(min(max(res.Size, 256<<10), maxReadBuffer))
		if !buffered.take(size) {
			return refusedBuffer("a read buffer", size, buffered, "")
		}
		defer buffered.give(size)
		buf := make([]byte, size)
		for err == nil {
			n, err = c.Read(buf)
			res.Reads++
			res.Bytes += int64(n)
		}
	}
	if err != io.EOF {
		return fmt.Errorf("read: %w", err)
	}
	if err := writeAck(c, res.Bytes); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	return nil
}

// refusedBuffer is the error of a test whose memory would pass what the
// server buffers for its clients together.
func refusedBuffer(what string, size int64, buffered *byteBudget, hint string) error {
	return fmt.Errorf("refused: %s of %s would pass the %s this server buffers for the clients it serves at once (-max-buffered; %s held now); try again when fewer are running%s",
		what, bytesize.Format(uint64(size)), bytesize.Format(uint64(buffered.size)), bytesize.Format(uint64(buffered.held())), hint)
}

// sendAll sends a -R client what its hello asks through w, half-closes c,
// and checks the client's count.
func sendAll(w, c net.Conn, h hello, res *ServerResult) error {
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
		n, err := w.Write(buf)
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
	got, err := readAck(w)
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
// so its memory comes from buffered, taken once the first message's first
// byte has come; a test that would take more than is left is refused.
func echo(c net.Conn, guard *connGuard, buffered *byteBudget, res *ServerResult) error {
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err == io.EOF {
		guard.begin()
		return nil
	} else if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	size := int64(res.Size)
	if !buffered.take(size) {
		return refusedBuffer("ping messages", size, buffered, ", or with a smaller -size")
	}
	defer buffered.give(size)
	buf := make([]byte, size)
	buf[0] = first[0]
	for got := 1; ; got = 0 {
		if _, err := io.ReadFull(c, buf[got:]); err == io.EOF && got == 0 {
			return nil
		} else if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if got == 1 {
			guard.begin() // the first message is in
		}
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		res.Messages++
		res.Bytes += size
	}
}

// What the server holds for each client at most: per perf connection its
// read buffer. A -R client's writes all come from one buffer of zeroes.
const maxReadBuffer = 1 << 20

// zeroes is what -R streams send: one buffer of maxSize bytes that they all
// share, made on the first -R test.
var zeroes = sync.OnceValue(func() []byte { return make([]byte, maxSize) })
