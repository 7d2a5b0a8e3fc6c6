//go:build linux && cgo

package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/rnet"
)

// wait bounds every wait of these tests: the guest runs under TCG.
const wait = 60 * time.Second

// listen starts a listener on the lab's server address and closes it at the
// end of the test.
func listen(t testing.TB, pair rdmatest.Pair, cfg *rnet.Config) *rnet.Listener {
	t.Helper()
	ln, err := (&rnet.ListenConfig{Config: cfg}).Listen(context.Background(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func dialer(pair rdmatest.Pair, cfg *rnet.Config) *rnet.Dialer {
	return &rnet.Dialer{Config: cfg, LocalAddr: &rnet.Addr{AddrPort: netip.AddrPortFrom(pair.Client, 0)}, Timeout: wait}
}

// connect dials ln from the client address and accepts: a connected pair,
// client first, crossing the veth from rxe0 to rxe1.
func connect(t testing.TB, pair rdmatest.Pair, ln *rnet.Listener, cfg *rnet.Config) (*rnet.Conn, *rnet.Conn) {
	t.Helper()
	type res struct {
		c   *rnet.Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := ln.AcceptRDMA()
		acc <- res{c, err}
	}()
	c, err := dialer(pair, cfg).Dial("rdma", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		c.Close()
		t.Fatal(r.err)
	}
	return c, r.c
}

// stream is a checksummed byte stream of random-size writes.
type stream struct {
	bytes int64
	crc   uint32
}

// pool is random data that writes take slices of.
var pool = func() []byte {
	b := make([]byte, 2<<20)
	r := rand.NewChaCha8([32]byte{'r', 'n', 'e', 't'})
	r.Read(b)
	return b
}()

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// send writes total bytes to w in writes of 1 B to maxWrite, sizes and
// contents from seed, and returns what it wrote. It stops at the first error.
func send(w io.Writer, total int64, maxWrite int, seed uint64) (stream, error) {
	r := rand.New(rand.NewPCG(seed, 1))
	var s stream
	for s.bytes < total {
		n := int64(1 + r.IntN(maxWrite))
		if r.IntN(4) == 0 {
			n = int64(1 + r.IntN(64)) // plenty of small writes too
		}
		n = min(n, total-s.bytes)
		off := r.IntN(len(pool) - int(n) + 1)
		b := pool[off : off+int(n)]
		m, err := w.Write(b)
		s.crc = crc32.Update(s.crc, crcTable, b[:m])
		s.bytes += int64(m)
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

// recv reads until EOF (or an error) with reads of random size, and returns
// what it read.
func recv(rd io.Reader, seed uint64) (stream, error) {
	r := rand.New(rand.NewPCG(seed, 2))
	buf := make([]byte, 1<<20)
	var s stream
	for {
		n, err := rd.Read(buf[:1+r.IntN(len(buf))])
		s.crc = crc32.Update(s.crc, crcTable, buf[:n])
		s.bytes += int64(n)
		if err == io.EOF {
			return s, nil
		}
		if err != nil {
			return s, err
		}
	}
}

// echoCheck proves c (and its listener's peer) still works: a small round trip.
func roundTrip(t testing.TB, a, b net.Conn, msg string) {
	t.Helper()
	a.SetDeadline(time.Now().Add(wait))
	b.SetDeadline(time.Now().Add(wait))
	defer a.SetDeadline(time.Time{})
	defer b.SetDeadline(time.Time{})
	if _, err := a.Write([]byte(msg)); err != nil {
		t.Fatalf("round trip write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(b, got); err != nil || string(got) != msg {
		t.Fatalf("round trip read: %q, %v", got, err)
	}
}

// run runs a command and fails the test if it fails.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// netem puts a netem qdisc on rvm0 (the client's end of the veth, so it
// affects everything rxe0 sends to rxe1) and removes it at cleanup.
func netem(t testing.TB, args ...string) {
	t.Helper()
	run(t, "tc", append([]string{"qdisc", "add", "dev", "rvm0", "root", "netem"}, args...)...)
	t.Cleanup(func() { exec.Command("tc", "qdisc", "del", "dev", "rvm0", "root").Run() })
}

// needLab skips (fails under RNET_REQUIRE_RDMA=1) when the interfaces the
// fault tests manipulate are not there, e.g. on real hardware.
func needLab(t testing.TB) rdmatest.Pair {
	t.Helper()
	pair := rdmatest.Require(t)
	if _, err := net.InterfaceByName("rvm0"); err != nil || os.Geteuid() != 0 {
		if rdmatest.Required() && os.Getenv("RNET_NATIVE") != "1" {
			t.Fatalf("fault injection needs the Soft-RoCE lab's rvm0 and root: %v", err)
		}
		t.Skip("fault injection needs the Soft-RoCE lab (rvm0, root)")
	}
	return pair
}

// snapshot is what a process holds: to compare before and after.
type snapshot struct {
	fds        int
	goroutines map[string]bool // IDs of the goroutines alive
	rdma       map[string]int
}

func takeSnapshot(t testing.TB) snapshot {
	t.Helper()
	return snapshot{fds: procstat.OpenFDs(t), goroutines: procstat.GoroutineIDs(), rdma: procstat.Resources(t)}
}

// checkNoLeaks compares now with before. Goroutines count by identity (see
// procstat.GoroutineIDs), and new ones get a bounded wait to finish
// exiting.
func checkNoLeaks(t testing.TB, before snapshot, what string) {
	t.Helper()
	fresh := procstat.WaitNoNewGoroutines(before.goroutines)
	after := snapshot{rdma: procstat.WaitResources(t, before.rdma), fds: procstat.WaitOpenFDs(t, before.fds), goroutines: procstat.GoroutineIDs()}
	var diffs []string
	if len(fresh) > 0 {
		diffs = append(diffs, fmt.Sprintf("%d new goroutines", len(fresh)))
	}
	if after.fds != before.fds {
		diffs = append(diffs, fmt.Sprintf("fds %d -> %d", before.fds, after.fds))
	}
	for _, k := range procstat.ResourceKinds {
		if after.rdma[k] != before.rdma[k] {
			diffs = append(diffs, fmt.Sprintf("%s %d -> %d", k, before.rdma[k], after.rdma[k]))
		}
	}
	if len(diffs) > 0 {
		if len(fresh) > 0 {
			t.Logf("new goroutines:\n%s", strings.Join(fresh, "\n\n"))
		}
		t.Errorf("%s leaked: %s", what, strings.Join(diffs, ", "))
	} else {
		t.Logf("%s: nothing leaked (fds %d, goroutines %d, rdma %v)", what, after.fds, len(after.goroutines), after.rdma)
	}
}

// readErr reads from c until an error other than a timeout and returns it
// and how long that took from start.
func readErr(c net.Conn, start time.Time, limit time.Duration) (error, time.Duration) {
	c.SetReadDeadline(start.Add(limit))
	buf := make([]byte, 64<<10)
	for {
		_, err := c.Read(buf)
		if err != nil {
			return err, time.Since(start)
		}
	}
}

var errTimedOut = errors.New("no error within the limit")

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

var _ = bytes.Equal
var _ sync.Mutex

// closeWithin closes c and fails the test, with every goroutine's stack, if
// that takes longer than limit: a hanging Close is a bug to report, not a
// reason to hang the suite. It returns how long Close took.
func closeWithin(t testing.TB, c io.Closer, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan struct{})
	go func() {
		c.Close()
		close(done)
	}()
	select {
	case <-done:
		return time.Since(start)
	case <-time.After(limit):
		buf := make([]byte, 4<<20)
		t.Errorf("Close did not return within %v; goroutines:\n%s", limit, buf[:runtime.Stack(buf, true)])
		return limit
	}
}

// The leak check counts goroutines by identity: one that starts after the
// snapshot is new even when another of the snapshot's has ended meanwhile.
func TestNewGoroutinesByIdentity(t *testing.T) {
	done := make(chan struct{})
	old := make(chan struct{})
	go func() { <-old }()
	before := procstat.GoroutineIDs()
	close(old)             // one of before's goroutines ends...
	go func() { <-done }() // ...and a new one starts
	if fresh := procstat.NewGoroutines(before); len(fresh) != 1 {
		t.Fatalf("%d new goroutines, want 1:\n%s", len(fresh), strings.Join(fresh, "\n\n"))
	}
	close(done)
	if fresh := procstat.WaitNoNewGoroutines(before); len(fresh) != 0 {
		t.Fatalf("%d new goroutines after the new one ended:\n%s", len(fresh), strings.Join(fresh, "\n\n"))
	}
}
