//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// rxePipe makes a connected pair over a real device: the client dials from the
// lab's client address (rxe0) to a listener on the server address (rxe1).
func rxeMaker(pair rdmatest.Pair, cfg *Config) pipeMaker {
	return func(t *testing.T) (*Conn, *Conn) {
		t.Helper()
		c1, c2, err := devicePipe(pair, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c1, c2
	}
}

// devicePipe connects a dialled and an accepted Conn between pair's
// addresses.
func devicePipe(pair rdmatest.Pair, cfg *Config) (*Conn, *Conn, error) {
	ln, err := (&ListenConfig{Config: cfg}).Listen(context.Background(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	type res struct {
		c   *Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := ln.AcceptRDMA()
		acc <- res{c, err}
	}()
	d := &Dialer{Config: cfg, LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, Timeout: 30 * time.Second}
	c1, err := d.Dial("rdma", ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	r := <-acc
	if r.err != nil {
		c1.Close()
		return nil, nil, r.err
	}
	return c1, r.c, nil
}

func TestRXENettest(t *testing.T) {
	testNettest(t, rxeMaker(rdmatest.Require(t), nil))
}

func TestRXEContract(t *testing.T) {
	testContract(t, rxeMaker(rdmatest.Require(t), nil))
}

func TestRXEIPv6(t *testing.T) {
	pair := rdmatest.Require6(t)
	c1, c2 := rxeMaker(pair, nil)(t)
	defer c1.Close()
	defer c2.Close()
	if _, err := c1.Write([]byte("over IPv6")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9)
	if _, err := io.ReadFull(c2, buf); err != nil || string(buf) != "over IPv6" {
		t.Fatalf("got %q, %v", buf, err)
	}
	if !c2.LocalAddr().(*Addr).Addr().Is6() {
		t.Errorf("local address %v is not IPv6", c2.LocalAddr())
	}
}

// TestRXEWildcardListen: Listen("rdma", ":port") takes IPv4 and IPv6
// connections, as net.Listen("tcp", ":port") does; "rdma4" and "rdma6" refuse
// the other family.
func TestRXEWildcardListen(t *testing.T) {
	pair4 := rdmatest.Require(t)
	pair6 := rdmatest.Require6(t)
	try := func(ln *Listener, from, to netip.Addr) error {
		t.Helper()
		port := ln.Addr().(*Addr).Port()
		accepted := make(chan *Conn, 1)
		go func() {
			c, _ := ln.AcceptRDMA() // ends with the listener
			accepted <- c
		}()
		d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(from, 0)}, Timeout: 30 * time.Second}
		c, err := d.Dial("rdma", netip.AddrPortFrom(to, port).String())
		if err != nil {
			ln.Close()
			<-accepted
			return err
		}
		defer c.Close()
		s := <-accepted
		if s == nil {
			t.Fatalf("dial %v to %v connected but Accept failed", from, to)
		}
		defer s.Close()
		if got := s.LocalAddr().(*Addr).Addr(); got != to {
			t.Errorf("accepted connection's local address %v, want %v", got, to)
		}
		if got := s.RemoteAddr().(*Addr).Addr(); got != from {
			t.Errorf("accepted connection's remote address %v, want %v", got, from)
		}
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		return nil
	}
	listen := func(network string) *Listener {
		t.Helper()
		ln, err := Listen(network, ":0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}

	ln := listen("rdma")
	if a := ln.Addr().(*Addr).Addr(); a != netip.IPv6Unspecified() {
		t.Errorf("Listen(\"rdma\", \":0\").Addr() = %v, want [::]", ln.Addr())
	}
	if err := try(ln, pair4.Client, pair4.Server); err != nil {
		t.Errorf("IPv4 to a wildcard rdma listener: %v", err)
	}
	if err := try(ln, pair6.Client, pair6.Server); err != nil {
		t.Errorf("IPv6 to a wildcard rdma listener: %v", err)
	}

	ln = listen("rdma6")
	if err := try(ln, pair6.Client, pair6.Server); err != nil {
		t.Errorf("IPv6 to an rdma6 listener: %v", err)
	}
	if err := try(ln, pair4.Client, pair4.Server); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("IPv4 to an rdma6 listener = %v, want refused", err)
	}

	ln = listen("rdma4")
	if err := try(ln, pair4.Client, pair4.Server); err != nil {
		t.Errorf("IPv4 to an rdma4 listener: %v", err)
	}
	if err := try(ln, pair6.Client, pair6.Server); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("IPv6 to an rdma4 listener = %v, want refused", err)
	}
}

// TestRXEDialTriesEachAddress: a host name whose first address refuses is
// dialled at its next one, as net.Dialer does.
func TestRXEDialTriesEachAddress(t *testing.T) {
	pair := rdmatest.Require(t)
	ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(int(ln.Addr().(*Addr).Port()))
	// Nothing listens on the client's own address at that port: refused.
	fakeLookup(t, pair.Client.String(), pair.Server.String())
	accepted := make(chan *Conn, 1)
	go func() {
		c, _ := ln.AcceptRDMA()
		accepted <- c
	}()
	d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, Timeout: 30 * time.Second}
	c, err := d.Dial("rdma", net.JoinHostPort("peer.example", port))
	if err != nil {
		ln.Close()
		<-accepted
		t.Fatalf("Dial of a name whose second address listens: %v", err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.Fatal("Accept failed")
	}
	defer s.Close()
	if got := c.RemoteAddr().(*Addr).Addr(); got != pair.Server {
		t.Errorf("connected to %v, want %v", got, pair.Server)
	}
}

// TestRXEDialFallsBackToIPv4: a name whose IPv6 address answers nobody
// (address resolution finds no neighbour) and whose IPv4 address listens
// connects over IPv4 once the fallback starts, and the abandoned IPv6
// attempt leaves nothing behind.
func TestRXEDialFallsBackToIPv4(t *testing.T) {
	pair := rdmatest.Require(t)
	pair6 := rdmatest.Require6(t)
	warmUp(t, pair)
	ln, err := Listen("rdma4", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	// An unused address in the lab's IPv6 subnet.
	silent := pair6.Server.As16()
	silent[15] ^= 0x77
	fakeLookup(t, netip.AddrFrom16(silent).String(), pair.Server.String())
	// An attempt holds fds of its own (its event channel at least). When
	// the IPv4 attempt (the only one that resolves) sets up its queue
	// pair, the IPv6 one is still resolving, so more fds are open than
	// when a dial to the IPv4 address alone gets there; dialling one
	// address after another, there would be as many.
	var fdsAtSetup atomic.Int64
	hook := func(accepting bool, step string) error {
		if !accepting && step == "pd" {
			if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
				fdsAtSetup.Store(int64(len(ents)))
			}
		}
		return nil
	}
	testHookSetupStage.Store(&hook)
	defer testHookSetupStage.Store(nil)
	accepted := make(chan *Conn, 1)
	acceptOne := func() {
		go func() {
			c, _ := ln.AcceptRDMA()
			accepted <- c
		}()
	}
	var d Dialer // the routing table picks the source; the fallback starts after 300 ms
	port := strconv.Itoa(int(ln.Addr().(*Addr).Port()))
	acceptOne()
	fds := countFDs(t)
	c, err := d.Dial("rdma", net.JoinHostPort(pair.Server.String(), port))
	if err != nil {
		ln.Close()
		<-accepted
		t.Fatalf("Dial of the IPv4 address alone: %v", err)
	}
	alone := fdsAtSetup.Load() - int64(fds)
	c.Close()
	if s := <-accepted; s != nil {
		s.Close()
	}

	acceptOne()
	fds = countFDs(t)
	c, err = d.Dial("rdma", net.JoinHostPort("peer.example", port))
	if err != nil {
		ln.Close()
		<-accepted
		t.Fatalf("Dial of a name whose IPv6 address is silent: %v", err)
	}
	raced := fdsAtSetup.Load() - int64(fds)
	if raced <= alone {
		t.Errorf("%d more fds open while the IPv4 attempt set up, %d when it was dialled alone: want the IPv6 attempt still going", raced, alone)
	}
	t.Logf("fds open at the IPv4 attempt's setup: %d more than before the dial, %d when it was dialled alone", raced, alone)
	s := <-accepted
	if s == nil {
		t.Fatal("Accept failed")
	}
	if got := c.RemoteAddr().(*Addr).Addr(); got != pair.Server {
		t.Errorf("connected to %v, want %v", got, pair.Server)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	s.Close()
	checkReleased(t, gor0, fds0, res0)
}

// TestRXENegativeDurations: a negative HandshakeTimeout means no bound of
// our own (it dropped every incoming connection at once, so connecting at
// all shows it), and a negative Linger makes Close discard what the peer
// has not taken at once, with ErrAborted, rather than wait for it.
func TestRXENegativeDurations(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	c1, c2 := rxeMaker(pair, &Config{HandshakeTimeout: -1, Linger: -1})(t)
	// More than the peer's ring, which nobody reads: some stays unsent.
	if _, err := c1.Write(make([]byte, 200<<10)); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c1.Close() }()
	select {
	case err := <-closed:
		if !errors.Is(err, ErrAborted) {
			t.Fatalf("Close with unsent data and a negative Linger = %v, want ErrAborted", err)
		}
	case <-time.After(time.Minute): // a hang detector
		t.Fatal("Close with a negative Linger waits for a peer that does not read")
	}
	c2.Close()
	checkReleased(t, gor0, fds0, res0) // an aborted connection leaves nothing behind either
}

// TestRXEListenerCloseReleasesUnaccepted: connections the listener has
// established but nobody accepted are closed with it, their dialers see
// the end, and nothing of them is left.
func TestRXEListenerCloseReleasesUnaccepted(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, Timeout: 30 * time.Second}
	var dialed []*Conn
	for range n {
		c, err := d.Dial("rdma", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		dialed = append(dialed, c)
	}
	// The dialer counts itself connected a moment before the listener
	// does; wait until all n wait for Accept.
	deadline := time.Now().Add(time.Minute)
	for len(ln.l.conns) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections reached the accept queue", len(ln.l.conns), n)
		}
		runtime.Gosched()
	}
	closed := make(chan error, 1)
	go func() { closed <- ln.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a hang detector
		t.Fatal("Listener.Close hung closing unaccepted connections")
	}
	for i, c := range dialed {
		c.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("dialer %d after the listener closed its unaccepted peer: %v, want io.EOF", i, err)
		}
		c.Close()
	}
	checkReleased(t, gor0, fds0, res0)
}

// TestRXEHugeBacklog: a Backlog past any sensible size is capped, not a
// panic in make(chan) or an int truncated on its way to rdma_listen.
func TestRXEHugeBacklog(t *testing.T) {
	pair := rdmatest.Require(t)
	lc := &ListenConfig{Backlog: math.MaxInt}
	ln, err := lc.Listen(context.Background(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.AcceptRDMA()
		if err == nil {
			_, err = c.Write([]byte("x"))
			c.Close()
		}
		accepted <- err
	}()
	d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, Timeout: 30 * time.Second}
	c, err := d.Dial("rdma", ln.Addr().String())
	if err != nil {
		ln.Close()
		t.Fatalf("dial a listener with a huge backlog: %v (accept: %v)", err, <-accepted)
	}
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
}

func TestRXEListenerClose(t *testing.T) {
	pair := rdmatest.Require(t)
	ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		errc <- err
	}()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
	}
	if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close = %v, want net.ErrClosed", err)
	}
}

func TestRXEDialErrors(t *testing.T) {
	pair := rdmatest.Require(t)
	from := &Addr{netip.AddrPortFrom(pair.Client, 0)}
	t.Run("Refused", func(t *testing.T) {
		// Nothing listens on this port: the peer's connection manager refuses.
		ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, err = (&Dialer{LocalAddr: from}).Dial("rdma", addr)
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "dial" || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial to a closed port = %v, want a dial OpError matching ECONNREFUSED", err)
		}
	})
	t.Run("Cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := (&Dialer{LocalAddr: from}).DialContext(ctx, "rdma", net.JoinHostPort(pair.Server.String(), "1"))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled dial = %v, want context.Canceled", err)
		}
	})
	t.Run("Deadline", func(t *testing.T) {
		// An address on the lab's subnet that nobody has: resolution never
		// completes, so the deadline ends the dial.
		unused := netip.AddrFrom4([4]byte{10, 77, 0, 99})
		if !pair.Server.Is4() || pair.Server.As4()[0] != 10 {
			unused = netip.MustParseAddr("192.0.2.1") // TEST-NET-1: never routed
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := (&Dialer{LocalAddr: from}).DialContext(ctx, "rdma", net.JoinHostPort(unused.String(), "7471"))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("dial past its deadline = %v, want a timeout matching context.DeadlineExceeded", err)
		}
	})
}

// TestRXEResourcesReleased dials and closes many connections and checks that
// fds, goroutines and the kernel's QP count come back to where they were.
func TestRXEResourcesReleased(t *testing.T) {
	pair := rdmatest.Require(t)
	cycles := 200
	if testing.Short() {
		cycles = 20
	}
	mk := rxeMaker(pair, &Config{SendBufferSize: 16 << 10, RecvBufferSize: 16 << 10})
	// One warm-up cycle: librdmacm opens its devices once per process.
	c1, c2 := mk(t)
	c1.Close()
	c2.Close()
	fds0, gor0, res0 := countFDs(t), procstat.GoroutineIDs(), procstat.Resources(t)
	var writers sync.WaitGroup
	for i := 0; i < cycles; i++ {
		c1, c2 := mk(t)
		if i%3 == 0 {
			// Some are closed mid-stream, with data in flight.
			writers.Add(1)
			go func() {
				defer writers.Done()
				c1.Write(make([]byte, 256<<10))
			}()
			// The first byte arriving proves the Write began; the rest,
			// larger than both rings, is still on its way.
			if _, err := io.ReadFull(c2, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
		}
		// Both ends at once: c1 alone would wait Linger for a reader
		// that is not reading.
		var closing sync.WaitGroup
		closing.Go(func() { c2.Close() })
		c1.Close()
		closing.Wait()
	}
	writers.Wait()
	// Goroutines count by identity, with a bounded wait for those on their
	// way out: rxeMaker's accept helper hands over its connection before it
	// exits, so a count taken just then may or may not include it.
	t.Logf("%d connect/close cycles", cycles)
	checkReleased(t, gor0, fds0, res0)
}

// warmUp makes and closes one connection, so that what librdmacm opens
// once per process and device is open before a test counts resources.
func warmUp(t *testing.T, pair rdmatest.Pair) {
	t.Helper()
	c1, c2, err := devicePipe(pair, nil)
	if err != nil && errors.Is(err, syscall.EINVAL) && strings.Contains(err.Error(), "rdma_connect") {
		// siw now and then ends a connect with a CONNECT_ERROR event
		// (EINVAL) about 1 s in, in a full device run; blocking signals
		// in rdma_connect did not end it, and its cause is not known.
		// The warm-up is not what a test checks, so it tries once more.
		t.Logf("warm-up connect failed, trying again: %v", err)
		c1, c2, err = devicePipe(pair, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	c1.Close()
	c2.Close()
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestRXEUnreferencedConnIsReleased: a device connection that is dropped
// without Close is closed once the collector finds it: the peer reads every
// byte, then io.EOF, and the queue pair, its memory, its channels, fds and
// goroutines are all released.
func TestRXEUnreferencedConnIsReleased(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	droppedConnDelivers(t, rxeMaker(pair, nil))
	checkReleased(t, gor0, fds0, res0)
}

// listenAndDrop listens and forgets the Listener without closing it.
func listenAndDrop(t *testing.T, pair rdmatest.Pair) {
	if _, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0")); err != nil {
		t.Fatal(err)
	}
}

// TestRXEUnreferencedListenerIsReleased: a Listener dropped without Close
// is closed once the collector finds it: its id, event channel, fd and
// acceptor goroutine are released.
func TestRXEUnreferencedListenerIsReleased(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	listenAndDrop(t, pair)
	if procstat.Resources(t)["cm_id"] != res0["cm_id"]+1 || len(procstat.NewGoroutines(gor0)) == 0 {
		t.Fatal("the listener made no id or no acceptor goroutine")
	}
	deadline := time.Now().Add(time.Minute)
	for procstat.Resources(t)["cm_id"] != res0["cm_id"] || len(procstat.NewGoroutines(gor0)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("still waiting after a minute of collections for the dropped Listener to close")
		}
		runtime.GC()
	}
	checkReleased(t, gor0, fds0, res0)
}
