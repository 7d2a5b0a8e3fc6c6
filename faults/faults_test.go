//go:build linux && cgo

package faults

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/rnet"
)

// keepCfg is the configuration of connections that must notice a dead peer
// quickly: a 1 s keepalive.
var keepCfg = &rnet.Config{KeepAlive: time.Second, Linger: 2 * time.Second}

// errorLimit bounds how long a fault may take to show as an error. Soft-RoCE
// retries without limit at the default RetryCount of 7, so a dead wire
// shows through keepalives (keepCfg: three periods of 1 s); a minute is
// generous even under TCG.
const errorLimit = 60 * time.Second

// peerDeadErr reports whether err is the error a dead peer gives,
// whichever showed first: the CM's disconnect without DISCONNECT, a
// transfer the peer's side failed (retries exhausted, its memory gone), or
// keepalives without an answer.
func peerDeadErr(err error) bool {
	return errors.Is(err, rnet.ErrPeerGone)
}

// TestFaultChildStreamer is not a test: TestFaultPeerKilled re-executes the
// test binary to run it as the peer it kills. It dials RNET_FAULTS_DIAL,
// says "connected" and writes until it dies.
func TestFaultChildStreamer(t *testing.T) {
	addr := os.Getenv("RNET_FAULTS_DIAL")
	if addr == "" {
		t.Skip("only run as TestFaultPeerKilled's child")
	}
	pair := rdmatest.Require(t)
	c, err := dialer(pair, keepCfg).Dial("rdma", addr)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("connected\n")
	for {
		if _, err := send(c, 1<<40, 1<<20, 9); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFaultPeerKilled SIGKILLs a peer process in the middle of a stream.
// The connection to it must fail with a clear error in bounded time, and
// Close must release it, while another connection keeps working.
func TestFaultPeerKilled(t *testing.T) {
	pair := needLab(t)
	ln := listen(t, pair, keepCfg)
	good1, good2 := connect(t, pair, ln, nil)
	defer closeWithin(t, good1, 30*time.Second)
	defer closeWithin(t, good2, 30*time.Second)
	// The child's queue pair goes with its process, ours with Close.
	before := takeSnapshot(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultChildStreamer$", "-test.v")
	cmd.Env = append(os.Environ(), "RNET_FAULTS_DIAL="+ln.Addr().String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if s.Text() == "connected" {
				lines <- s.Text()
			}
		}
		close(lines)
	}()
	c, err := ln.AcceptRDMA()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Mid-stream: some data has arrived and more is on its way.
	c.SetReadDeadline(time.Now().Add(wait))
	if _, err := io.ReadFull(c, make([]byte, 4<<20)); err != nil {
		t.Fatalf("reading from the child: %v", err)
	}
	<-lines
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	err, took := readErr(c, start, errorLimit)
	if isTimeout(err) || err == io.EOF || !peerDeadErr(err) {
		t.Fatalf("Read after the peer was killed = %v after %v, want rnet.ErrPeerGone", err, took)
	}
	t.Logf("peer SIGKILLed mid-stream: %v after %v", err, took.Round(time.Millisecond))
	if _, err := c.Write([]byte("x")); err == nil {
		t.Error("Write to a dead peer succeeded")
	}
	closeStart := time.Now()
	c.Close()
	t.Logf("Close of the dead connection took %v", time.Since(closeStart).Round(time.Millisecond))
	roundTrip(t, good1, good2, "unaffected by the killed peer")
	checkNoLeaks(t, before, "the connection to the killed peer")
}

// TestFaultChildBurst is not a test: TestFaultPeerKilledDataKept runs it as
// the peer it kills. It dials RNET_FAULTS_BURST, writes burstMsg and waits
// to be killed.
func TestFaultChildBurst(t *testing.T) {
	addr := os.Getenv("RNET_FAULTS_BURST")
	if addr == "" {
		t.Skip("only run as TestFaultPeerKilledDataKept's child")
	}
	pair := rdmatest.Require(t)
	c, err := dialer(pair, keepCfg).Dial("rdma", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(burstMsg); err != nil {
		t.Fatal(err)
	}
	c.Read(make([]byte, 1)) // until killed
}

// burstMsg is one message on the wire: under the 2 KiB a connection's first
// transfer is cut to, so one byte read shows all of it has arrived.
var burstMsg = bytes.Repeat([]byte("acknowledged bytes are not lost. "), 45)

// TestFaultPeerKilledDataKept: bytes that arrived before the peer was killed
// are read after the connection has learnt of the death (as TCP reads what
// came before a reset), and then Read reports ErrPeerGone.
func TestFaultPeerKilledDataKept(t *testing.T) {
	pair := needLab(t)
	ln := listen(t, pair, keepCfg)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultChildBurst$", "-test.v")
	cmd.Env = append(os.Environ(), "RNET_FAULTS_BURST="+ln.Addr().String())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	c, err := ln.AcceptRDMA()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(errorLimit))
	first := make([]byte, 1)
	if _, err := io.ReadFull(c, first); err != nil {
		t.Fatalf("reading from the child: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// Write until the connection knows: then the death has been handled
	// while the rest of the message still waited to be read.
	for {
		if _, err := c.Write(burstMsg); err != nil {
			if !peerDeadErr(err) {
				t.Fatalf("Write to the killed peer: %v, want rnet.ErrPeerGone", err)
			}
			break
		}
	}
	rest, err := io.ReadAll(c)
	if !bytes.Equal(append(first, rest...), burstMsg) {
		t.Errorf("read %d bytes after the kill, want the %d left of what arrived", len(rest), len(burstMsg)-1)
	}
	if !peerDeadErr(err) {
		t.Errorf("Read after the data: %v, want rnet.ErrPeerGone", err)
	}
}

// TestFaultListenerCloseDuringConnects closes a listener while a burst of
// dials is arriving. Every dial must end (connected or refused) in bounded
// time, every connection that got through must end, and nothing may leak.
func TestFaultListenerCloseDuringConnects(t *testing.T) {
	pair := rdmatest.Require(t)
	cfg := &rnet.Config{SendBufferSize: 16 << 10, RecvBufferSize: 16 << 10, Linger: time.Second, HandshakeTimeout: 5 * time.Second}
	// Warm up: librdmacm opens its devices once per process.
	{
		ln := listen(t, pair, cfg)
		a, b := connect(t, pair, ln, cfg)
		a.Close()
		b.Close()
		ln.Close()
	}
	before := takeSnapshot(t)
	ln, err := (&rnet.ListenConfig{Config: cfg}).Listen(context.Background(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	accepted := make(chan struct{}, 1)
	var acceptWG sync.WaitGroup
	acceptWG.Add(1)
	go func() {
		defer acceptWG.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			notify(accepted)
			c.Close()
		}
	}()
	const dials = 32
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, refused int
	start := time.Now()
	for i := 0; i < dials; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dialer(pair, cfg).Dial("rdma", addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				// Refused, or a handshake cut off by the Close: either way
				// a typed dial error, and not a wait for a timeout.
				var oe *net.OpError
				if !errors.As(err, &oe) || oe.Op != "dial" || isTimeout(err) {
					t.Errorf("dial while the listener closed: %v, want a prompt dial *net.OpError", err)
				}
				refused++
				return
			}
			ok++
			mu.Unlock()
			// Closed by our accept loop or by the listener: it must end.
			rerr, took := readErr(c, time.Now(), errorLimit)
			if isTimeout(rerr) {
				t.Errorf("a connection that got through did not end within %v", took)
			}
			c.Close()
			mu.Lock()
		}()
	}
	select { // the burst is under way
	case <-accepted:
	case <-time.After(wait):
		ln.Close()
		t.Fatal("no dial of the burst got through")
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	acceptWG.Wait()
	t.Logf("listener closed during a burst of %d dials: %d connected and ended, %d refused, all within %v",
		dials, ok, refused, time.Since(start).Round(time.Millisecond))
	if ok == 0 || ok+refused != dials {
		t.Errorf("%d connected and %d refused of %d dials", ok, refused, dials)
	}
	checkNoLeaks(t, before, "listener closed mid-burst")
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// TestFaultDialErrors: dials that cannot succeed fail fast with an error
// that says why.
func TestFaultDialErrors(t *testing.T) {
	pair := rdmatest.Require(t)
	from := &rnet.Addr{AddrPort: netip.AddrPortFrom(pair.Client, 0)}
	dial := func(t *testing.T, d *rnet.Dialer, addr string) (error, time.Duration) {
		start := time.Now()
		c, err := d.Dial("rdma", addr)
		if err == nil {
			c.Close()
			t.Fatalf("dial %s succeeded", addr)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "dial" {
			t.Errorf("dial %s = %v, want a *net.OpError for dial", addr, err)
		}
		return err, time.Since(start)
	}
	t.Run("NothingListens", func(t *testing.T) {
		ln := listen(t, pair, nil)
		addr := ln.Addr().String()
		ln.Close()
		err, took := dial(t, &rnet.Dialer{LocalAddr: from, Timeout: wait}, addr)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("got %v, want ECONNREFUSED", err)
		}
		t.Logf("nothing listens: %v after %v", err, took.Round(time.Millisecond))
	})
	t.Run("DoesNotResolve", func(t *testing.T) {
		err, took := dial(t, &rnet.Dialer{Timeout: wait}, "no-such-host.invalid:7471")
		var dns *net.DNSError
		if !errors.As(err, &dns) {
			t.Fatalf("got %v, want a *net.DNSError", err)
		}
		t.Logf("does not resolve: %v after %v", err, took.Round(time.Millisecond))
	})
	t.Run("NotOnAnyDevice", func(t *testing.T) {
		err, took := dial(t, &rnet.Dialer{Timeout: wait}, "127.0.0.1:7471")
		if !errors.Is(err, syscall.ENODEV) && !errors.Is(err, syscall.EADDRNOTAVAIL) && !errors.Is(err, syscall.ENETUNREACH) {
			t.Fatalf("got %v, want ENODEV (no RDMA device has 127.0.0.1)", err)
		}
		t.Logf("not on any RDMA device: %v after %v", err, took.Round(time.Millisecond))
	})
}
