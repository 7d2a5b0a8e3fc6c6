package tcpqp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/stream"
	"github.com/rnet-dev/rnet/internal/wr"
)

var (
	_ stream.QueuePair      = (*QP)(nil)
	_ stream.SoftwarePoster = (*QP)(nil)
	_ stream.SpinSharer     = (*QP)(nil)
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil {
		d.Close()
		t.Fatal(a.err)
	}
	return d.(*net.TCPConn), a.c.(*net.TCPConn)
}

// end is one side of an engine pair over TCP.
type end struct {
	qp  *QP
	eng *ring.Engine
}

// enginePair builds two engines configured by cfg over a loopback TCP
// connection; begin, if not nil, runs before Establish (a resume's
// BeginResume).
func enginePair(t *testing.T, cfg ring.Config, begin func(a, b *ring.Engine) error) (a, b end) {
	t.Helper()
	ca, cb := tcpPair(t)
	layout := cfg.Layout()
	opts := Options{SendDepth: layout.SendDepth, RecvDepth: layout.RecvDepth}
	a.qp, b.qp = New(ca, opts), New(cb, opts)
	var err error
	if a.eng, err = NewEngine(cfg, a.qp); err != nil {
		t.Fatal(err)
	}
	if b.eng, err = NewEngine(cfg, b.qp); err != nil {
		t.Fatal(err)
	}
	if begin != nil {
		if err := begin(a.eng, b.eng); err != nil {
			t.Fatal(err)
		}
	}
	pa, pb := a.eng.LocalConnData(), b.eng.LocalConnData()
	if err := a.eng.Establish(pb[:]); err != nil {
		t.Fatal(err)
	}
	if err := b.eng.Establish(pa[:]); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// pattern is the byte at offset i of stream seed.
func pattern(seed byte, i int) byte { return byte(uint32(i)*2654435761>>13) ^ seed }

func writePattern(c *stream.Conn, seed byte, total int) error {
	buf := make([]byte, 100_003)
	for off, step := 0, 1; off < total; step = step*7%100_003 + 1 {
		n := min(step, total-off)
		for i := range n {
			buf[i] = pattern(seed, off+i)
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return err
		}
		off += n
	}
	return c.CloseWrite()
}

func readPattern(c *stream.Conn, seed byte, total int) error {
	buf := make([]byte, 77_777)
	off := 0
	for step := 1; ; step = step*5%77_777 + 1 {
		n, err := c.Read(buf[:step])
		for i := range n {
			if buf[i] != pattern(seed, off+i) {
				return fmt.Errorf("byte %d is %#x, want %#x", off+i, buf[i], pattern(seed, off+i))
			}
		}
		off += n
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read after %d bytes: %w", off, err)
		}
	}
	if off != total {
		return fmt.Errorf("read %d bytes, want %d", off, total)
	}
	return nil
}

func testSettings(cfg ring.Config) stream.Settings {
	return stream.Settings{
		Ring:             cfg,
		ReapDelay:        stream.DefaultReapDelay,
		BusyPoll:         10 * time.Microsecond,
		BusyPollLimit:    250 * time.Microsecond,
		BusyPollLimitMax: 2 * time.Millisecond,
		KeepAlive:        15 * time.Second,
		Linger:           10 * time.Second,
	}
}

// Two connections over TCP stream 8 MiB each way at once, every byte
// checked, end with CloseWrite and Close, and leave no goroutine and no
// region behind.
func TestStreamBothWays(t *testing.T) {
	before := procstat.GoroutineIDs()
	cfg := ring.Config{}.Normalize()
	a, b := enginePair(t, cfg, nil)
	set := testSettings(cfg)
	ca, cb := stream.Start(a.qp, a.eng, set), stream.Start(b.qp, b.eng, set)

	const total = 8 << 20
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	run := func(name string, f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	run("a writes", func() error { return writePattern(ca, 1, total) })
	run("b writes", func() error { return writePattern(cb, 2, total) })
	run("b reads", func() error { return readPattern(cb, 1, total) })
	run("a reads", func() error { return readPattern(ca, 2, total) })
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := ca.Close(); err != nil {
		t.Errorf("close a: %v", err)
	}
	if err := cb.Close(); err != nil {
		t.Errorf("close b: %v", err)
	}
	// No call busy-polled a queue pair whose completions its own
	// goroutines make, though the Settings ask for spins.
	for name, c := range map[string]*stream.Conn{"a": ca, "b": cb} {
		if st := c.Stats(); st.Spins != 0 || st.SpinsDeferred == 0 {
			t.Errorf("%s: %d spins, %d left to others; want none, and some", name, st.Spins, st.SpinsDeferred)
		}
	}
	// Both closed: nothing steps the engines any more.
	if sa, sb := a.eng.Stats(), b.eng.Stats(); sa.RecvRingGrowths+sb.RecvRingGrowths == 0 {
		t.Error("no receive ring grew: regions added while running went untested")
	}
	for _, q := range []*QP{a.qp, b.qp} {
		q.mu.Lock()
		if n := len(q.mem.regions); n != 0 {
			t.Errorf("%d regions left after Close", n)
		}
		q.mu.Unlock()
	}
	if left := procstat.WaitNoNewGoroutines(before); len(left) > 0 {
		t.Fatalf("%d goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// drive steps one engine over its queue pair until done holds, waiting for
// completions in between.
func drive(q *QP, e *ring.Engine, done func() bool) error {
	wcs := make([]wr.Completion, 16)
	for {
		n, err := q.Step(0, e.PostRecvs(nil), e.PostSends(nil), wcs, 1)
		if err != nil {
			return err
		}
		if err := e.Complete(wcs[:n]); err != nil {
			return err
		}
		if done() {
			return nil
		}
		if n == len(wcs) {
			continue
		}
		if _, err := q.Wait(); err != nil {
			return err
		}
	}
}

// Engines that start a resumed queue pair (BeginResume before Establish)
// trade their exchanges over TCP.
func TestResumeExchange(t *testing.T) {
	before := procstat.GoroutineIDs()
	cfg := ring.Config{RetainUntilReceived: true}.Normalize()
	own := [2][ring.ExchangeSize]byte{[ring.ExchangeSize]byte{1, 2, 3}, [ring.ExchangeSize]byte{9, 8, 7}}
	a, b := enginePair(t, cfg, func(a, b *ring.Engine) error {
		return errors.Join(a.BeginResume(own[0]), b.BeginResume(own[1]))
	})
	for _, e := range []end{a, b} {
		e.qp.Start(failOnEvent{t})
	}
	var wg sync.WaitGroup
	for i, e := range []end{a, b} {
		wg.Go(func() {
			if err := drive(e.qp, e.eng, e.eng.ResumeReady); err != nil {
				t.Errorf("side %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for i, e := range []end{a, b} {
		if got, ok := e.eng.PeerExchange(); !ok || got != own[1-i] {
			t.Errorf("side %d got the exchange %x, %v; want %x", i, got, ok, own[1-i])
		}
	}
	// Both stop taking events first: one side's close is the other's
	// disconnect.
	for _, e := range []end{a, b} {
		e.qp.Shutdown()
	}
	for _, e := range []end{a, b} {
		e.qp.Disconnect()
		if err := e.qp.Destroy(); err != nil {
			t.Error(err)
		}
	}
	if left := procstat.WaitNoNewGoroutines(before); len(left) > 0 {
		t.Fatalf("%d goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// failOnEvent fails a test that expects no transport event before it
// shuts the queue pair down.
type failOnEvent struct{ t *testing.T }

func (h failOnEvent) TransportDisconnected() { h.t.Error("unexpected TransportDisconnected") }
func (h failOnEvent) TransportFailed(err error) {
	h.t.Errorf("unexpected TransportFailed(%v)", err)
}

// Destroy needs no Start, and a second Destroy returns an error.
func TestDestroyWithoutStart(t *testing.T) {
	before := procstat.GoroutineIDs()
	a, b := tcpPair(t)
	defer b.Close()
	q := New(a, Options{})
	if _, err := q.AddRegion(ring.RegionRecv, 4096); err != nil {
		t.Fatal(err)
	}
	q.Shutdown()
	if _, err := q.Wait(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Wait after Shutdown = %v, want net.ErrClosed", err)
	}
	if err := q.Destroy(); err != nil {
		t.Fatalf("Destroy = %v", err)
	}
	if err := q.Destroy(); err == nil {
		t.Error("second Destroy returned nil")
	}
	if _, err := q.Step(0, nil, nil, make([]wr.Completion, 4), 1); err == nil {
		t.Error("Step after Destroy returned no error")
	}
	// The socket is closed: the peer reads EOF.
	if _, err := b.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("peer read %v, want EOF", err)
	}
	if left := procstat.WaitNoNewGoroutines(before); len(left) > 0 {
		t.Fatalf("%d goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// Destroy after Start, without Shutdown, ends every goroutine; so does a
// second Destroy attempt.
func TestDestroyTwiceAfterStart(t *testing.T) {
	before := procstat.GoroutineIDs()
	a, b := tcpPair(t)
	defer b.Close()
	q := New(a, Options{})
	q.Start(failOnEvent{t})
	if err := q.Destroy(); err != nil {
		t.Fatalf("Destroy = %v", err)
	}
	if err := q.Destroy(); err == nil {
		t.Error("second Destroy returned nil")
	}
	if left := procstat.WaitNoNewGoroutines(before); len(left) > 0 {
		t.Fatalf("%d goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// Regions get distinct keys and addresses apart from each other, and the
// rkey is not the lkey.
func TestRegions(t *testing.T) {
	a, b := tcpPair(t)
	defer b.Close()
	q := New(a, Options{})
	defer q.Destroy()
	var regs []ring.Region
	for range 8 {
		r, err := q.AddRegion(ring.RegionRecv, 5000)
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, r)
	}
	for i, r := range regs {
		if r.RKey == r.LKey || r.RKey == 0 {
			t.Errorf("region %d: rkey %#x, lkey %#x", i, r.RKey, r.LKey)
		}
		for _, o := range regs[:i] {
			if o.RKey == r.RKey || o.LKey == r.LKey || r.Addr < o.Addr+uint64(len(o.Buf))+4096 {
				t.Errorf("regions %+v and %+v overlap or share keys", o, r)
			}
		}
	}
	if err := q.RemoveRegion(regs[3]); err != nil {
		t.Fatal(err)
	}
	if err := q.RemoveRegion(regs[3]); err == nil {
		t.Error("removing a region twice succeeded")
	}
	if !bytes.Equal(regs[0].Buf, make([]byte, 5000)) {
		t.Error("a new region is not zeroed")
	}
}
