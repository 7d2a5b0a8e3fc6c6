package main

import (
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnettest"
)

// limitedServer is a perf server run in this process on ln with limits,
// and what it has done.
type limitedServer struct {
	*perfServer
	addr   string
	served chan struct{} // one per connection whose holdings were given back
	out    lockedBuffer  // its stdout: the results
	errs   lockedBuffer  // its stderr
}

// lockedBuffer is a stderr that a test reads while the server writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveLimited serves ln with limits; gather, if set, overrides the time a
// -P test's streams have to join (-hello-timeout's).
func serveLimited(t *testing.T, ln net.Listener, limits serverLimits, gather ...time.Duration) *limitedServer {
	t.Helper()
	s := &limitedServer{addr: ln.Addr().String(), served: make(chan struct{}, 1000)}
	s.perfServer = newPerfServer(perfOpts{tcp: true, limits: limits}, &s.out, &s.errs)
	for _, d := range gather {
		s.tests.gather = d
	}
	s.perfServer.served = func() { s.served <- struct{}{} }
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ln)
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return s
}

func tcpListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// testLimits are limits no test reaches unless it sets them.
var testLimits = serverLimits{helloTimeout: time.Hour, idleTimeout: time.Hour, maxConns: 1000, maxPinned: 1 << 40, maxBuffered: 1 << 40}

// failAfter bounds a wait that only a broken server makes long, so that
// such a server fails the test rather than hanging it.
const failAfter = time.Minute

// waitServed waits until n connections have been given back.
func (s *limitedServer) waitServed(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-s.served:
		case <-time.After(failAfter):
			t.Fatalf("only %d of %d connections ended within %v; stderr:\n%s", i, n, failAfter, s.errs.String())
		}
	}
}

// waitClosed waits until the server closes c (reading what it sends
// before).
func waitClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(failAfter))
	if _, err := io.Copy(io.Discard, c); isTimeout(err) {
		t.Fatalf("%s: %v; want the server to close it", what, err)
	}
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pingOnce makes a ping round trip of size bytes on c, after the hello if
// hello is set.
func pingOnce(t *testing.T, c net.Conn, size int, sendHello bool) {
	t.Helper()
	msg := bytes.Repeat([]byte{9}, size)
	if sendHello {
		msg = append(hello{mode: modePing, size: uint32(size)}.encode(), msg...)
	}
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("ping write: %v", err)
	}
	if _, err := io.ReadFull(c, make([]byte, size)); err != nil {
		t.Fatalf("ping echo: %v", err)
	}
}

// TestPerfServerDropsIdleClients: a client that sends no hello, or a hello
// but no first message, is dropped at -hello-timeout; one that stops after
// its first message at -idle-timeout; a -P test whose announced streams do
// not all come frees its slot at -hello-timeout, so that 64 announcements
// that idle do not hold every slot.
func TestPerfServerDropsIdleClients(t *testing.T) {
	t.Run("hello", func(t *testing.T) {
		l := testLimits
		l.helloTimeout = 10 * time.Millisecond
		s := serveLimited(t, tcpListener(t), l)
		silent := dialTCP(t, s.addr)
		waitClosed(t, silent, "a client that sent nothing")
		hold := dialTCP(t, s.addr)
		hold.Write(hello{mode: modePing, size: maxSize}.encode()) // fails if it came too late: the same drop
		waitClosed(t, hold, "a ping client that sent its hello and no message")
		s.waitServed(t, 2)
		if got := strings.Count(s.errs.String(), "dropped: no hello and first message within 10ms (-hello-timeout)"); got != 2 {
			t.Errorf("%d of 2 drops named -hello-timeout; stderr:\n%s", got, s.errs.String())
		}
		if held := s.buffered.held(); held != 0 {
			t.Errorf("%d bytes buffered after both clients were dropped", held)
		}
	})
	t.Run("idle", func(t *testing.T) {
		// Over TCP and over rnet, whose transport's counters count as
		// moved bytes too.
		f := rnettest.NewFabric(nil)
		rdmaLn, err := f.Listen("rdma", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		for _, ln := range []net.Listener{tcpListener(t), rdmaLn} {
			l := testLimits
			l.idleTimeout = 10 * time.Millisecond
			s := serveLimited(t, ln, l)
			var c net.Conn
			if ln == rdmaLn {
				rc, err := f.Dial("rdma", s.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer rc.Close()
				c = rc
			} else {
				c = dialTCP(t, s.addr)
			}
			// The hello and a first message, and then nothing: not even the
			// echo is read, as the server may drop the client before it
			// writes it.
			if _, err := c.Write(append(hello{mode: modePing, size: 1000}.encode(), make([]byte, 1000)...)); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, c, "a ping client that went quiet")
			s.waitServed(t, 1)
			if !strings.Contains(s.errs.String(), "dropped: no byte moved for 10ms (-idle-timeout)") {
				t.Errorf("the drop does not name -idle-timeout; stderr:\n%s", s.errs.String())
			}
		}
	})
	t.Run("announcements", func(t *testing.T) {
		// Only the gather time is short, so that no stream is dropped
		// for its own hello.
		s := serveLimited(t, tcpListener(t), testLimits, 10*time.Millisecond)
		announced := make([]net.Conn, maxPendingTests)
		for i := range announced {
			announced[i] = dialTCP(t, s.addr)
			h := hello{mode: modePerf, stream: 1, streams: 2, size: 1, test: uint32(i)}
			// A byte after the hello, so that the first message has come
			// and only the second stream is missing.
			if _, err := announced[i].Write(append(h.encode(), 0)); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range announced {
			waitClosed(t, c, "stream 1 of an announced test of 2")
		}
		s.waitServed(t, maxPendingTests)
		if got := strings.Count(s.out.String(), "error: stream 1: dropped: only 1 of the 2 streams the client announced came within 10ms (-hello-timeout)"); got != maxPendingTests {
			t.Errorf("%d of %d tests were given up; results:\n%s", got, maxPendingTests, s.out.String())
		}
		s.tests.mu.Lock()
		gathering := s.tests.gathering
		s.tests.mu.Unlock()
		if gathering != 0 {
			t.Errorf("%d test slots still held after every announced test was given up", gathering)
		}
	})
}

// TestPerfServerCapsTotals: past -max-conns, -max-pinned (the RDMA
// connections' rings at their maximum) or -max-buffered (read buffers and
// ping messages) a client is refused with the flag named, the clients
// already served keep working, and what a client held is given back when
// it ends.
func TestPerfServerCapsTotals(t *testing.T) {
	t.Run("conns", func(t *testing.T) {
		l := testLimits
		l.maxConns = 2
		s := serveLimited(t, tcpListener(t), l)
		first, second := dialTCP(t, s.addr), dialTCP(t, s.addr)
		pingOnce(t, first, 64, true)
		pingOnce(t, second, 64, true)
		waitClosed(t, dialTCP(t, s.addr), "a third connection")
		if !strings.Contains(s.errs.String(), "2 connections are open, the most this server serves at once (-max-conns)") {
			t.Errorf("the refusal does not name -max-conns; stderr:\n%s", s.errs.String())
		}
		pingOnce(t, second, 64, false)
		first.Close()
		s.waitServed(t, 1)
		pingOnce(t, dialTCP(t, s.addr), 64, true)
	})
	t.Run("pinned", func(t *testing.T) {
		cfg := &rnet.Config{SendBufferSize: 64 << 10, RecvBufferSize: 64 << 10}
		f := rnettest.NewFabric(cfg)
		ln, err := f.Listen("rdma", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dial := func() *rnet.Conn {
			t.Helper()
			c, err := f.Dial("rdma", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		per := pinnedMax(rnet.Config{SendBufferSize: 64 << 10, RecvBufferSize: 64 << 10})
		l := testLimits
		l.maxPinned = per*5/2 + 1 // two connections, not three
		s := serveLimited(t, ln, l)
		first, second := dial(), dial()
		pingOnce(t, first, 64, true)
		pingOnce(t, second, 64, true)
		if held, want := s.pinned.held(), 2*pinnedMax(first.Config()); held != want {
			t.Errorf("two connections hold %d pinned bytes, want %d (both rings at their 64 KiB maximum)", held, want)
		}
		waitClosed(t, dial(), "a third RDMA connection")
		if !strings.Contains(s.errs.String(), "(-max-pinned)") {
			t.Errorf("the refusal does not name -max-pinned; stderr:\n%s", s.errs.String())
		}
		pingOnce(t, second, 64, false)
		first.Close()
		s.waitServed(t, 1)
		pingOnce(t, dial(), 64, true)
	})
	t.Run("buffered", func(t *testing.T) {
		l := testLimits
		l.maxBuffered = 300 << 10
		s := serveLimited(t, tcpListener(t), l)
		held := dialTCP(t, s.addr)
		pingOnce(t, held, 200<<10, true)
		refused := dialTCP(t, s.addr)
		go refused.Write(append(hello{mode: modePing, size: 200 << 10}.encode(), make([]byte, 200<<10)...))
		waitClosed(t, refused, "a ping past -max-buffered")
		perf := dialTCP(t, s.addr)
		perf.Write(append(hello{mode: modePerf, size: 64 << 10}.encode(), 0))
		waitClosed(t, perf, "a perf stream whose read buffer passes -max-buffered")
		s.waitServed(t, 2)
		for _, want := range []string{
			"refused: ping messages of 200 KiB would pass the 300 KiB this server buffers for the clients it serves at once (-max-buffered; 200 KiB held now)",
			"refused: a read buffer of 256 KiB would pass the 300 KiB this server buffers",
		} {
			if !strings.Contains(s.errs.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, s.errs.String())
			}
		}
		pingOnce(t, held, 200<<10, false)
		held.Close()
		s.waitServed(t, 1)
		pingOnce(t, dialTCP(t, s.addr), 200<<10, true)
	})
}
