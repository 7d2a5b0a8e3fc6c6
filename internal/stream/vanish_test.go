package stream

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// TestSimPeerVanishedDataKept: bytes that arrived before the peer's transport
// went away without a DISCONNECT are still read, as TCP reads what came
// before a reset; then Read reports ring.ErrPeerGone, not io.EOF.
func TestSimPeerVanishedDataKept(t *testing.T) {
	a, b := simPipe(t, nil)
	defer a.Close()
	defer b.Close()
	msg := []byte("the last words before the peer vanished")
	if _, err := a.Write(msg); err != nil {
		t.Fatal(err)
	}
	b.SetDeadline(time.Now().Add(time.Minute))
	first := make([]byte, 1)
	if _, err := io.ReadFull(b, first); err != nil {
		t.Fatal(err)
	}
	simQPOf(a).Disconnect() // the transport goes, no DISCONNECT said
	// Once a Write fails, the connection knows the peer is gone.
	for {
		if _, err := b.Write(msg); err != nil {
			if !errors.Is(err, ring.ErrPeerGone) {
				t.Fatalf("Write to the vanished peer: %v, want ring.ErrPeerGone", err)
			}
			break
		}
	}
	rest, err := io.ReadAll(b)
	if string(first)+string(rest) != string(msg) {
		t.Errorf("read %q after the peer vanished, want %q", rest, msg[1:])
	}
	if !errors.Is(err, ring.ErrPeerGone) {
		t.Errorf("Read after the data: %v, want ring.ErrPeerGone", err)
	}
}

// TestSimCloseReadEndsSpinningRead: CloseRead ends a Read that is busy
// polling (here for up to a minute), as it ends a parked one, with io.EOF.
func TestSimCloseReadEndsSpinningRead(t *testing.T) {
	a, b := simPipe(t, func(s *Settings) { s.BusyPoll = time.Minute })
	defer a.Close()
	defer b.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := a.Read(make([]byte, 1))
		errc <- err
	}()
	conntest.Until(t, "the Read to spin", func() bool { return a.Stats().Spins > 0 })
	if err := a.CloseRead(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != io.EOF {
			t.Fatalf("Read after CloseRead = %v, want io.EOF", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a spinning Read did not see CloseRead")
	}
}

// TestSimPusherHandOverToLeavingRead: a Write returned with bytes waiting
// for the peer's grant, so the pusher polls; a Read with a deadline queues
// behind it, and the deadline's kick makes the pusher hand the wait over to
// that Read, which leaves. Someone must still poll: the peer's grant has to
// bring the rest of the Write out, not a keepalive tick.
// Keepalive ticks are an hour apart here, so none can rescue a lost wakeup
// before the 10 s deadline fails the test.
func TestSimPusherHandOverToLeavingRead(t *testing.T) {
	small := func(s *Settings) {
		s.Ring.SendBufferSize, s.Ring.RecvBufferSize = 4096, 4096
		s.Ring.SendQueueSize, s.Ring.RecvQueueSize = 16, 16
		s.KeepAlive = time.Hour
	}
	for range 20 {
		a, b := simPipe(t, small)
		// Signalled at each park; the pusher parks, as b grants nothing
		// until it reads.
		parking := make(chan struct{}, 1)
		simQPOf(a).Waiting = parking
		msg := make([]byte, 6000)
		if n, err := a.Write(msg); n != len(msg) || err != nil {
			t.Fatal(n, err)
		}
		conntest.Signalled(t, "the pusher to park", parking, func() bool {
			a.mu.Lock()
			defer a.mu.Unlock()
			return a.pushing && a.waitOwned
		})
		a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := a.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read: %v", err)
		}
		// The Write handed the wait to the pusher, at least.
		if st := a.Stats(); st.HandOffs == 0 {
			t.Fatal("Stats.HandOffs 0 after the pusher took the wait")
		}
		b.SetReadDeadline(time.Now().Add(10 * time.Second)) // a failure bound only
		if _, err := io.ReadFull(b, make([]byte, len(msg))); err != nil {
			t.Fatalf("the rest of the Write did not come: %v", err)
		}
		a.Close()
		b.Close()
	}
}

// TestSimLingerExpiryIsNotEOF: Close gives up on a peer that does not read
// within Linger. It returns ring.ErrAborted, and the peer reads what came and then
// ring.ErrPeerGone: never a clean io.EOF after a truncated stream.
func TestSimLingerExpiryIsNotEOF(t *testing.T) {
	a, b := simPipe(t, func(s *Settings) { s.Linger = 100 * time.Millisecond })
	defer b.Close()
	msg := make([]byte, 200<<10) // more than the peer's 128 KiB ring
	if n, err := a.Write(msg); n != len(msg) || err != nil {
		t.Fatal(n, err)
	}
	if err := a.Close(); !errors.Is(err, ring.ErrAborted) {
		t.Fatalf("Close after Linger = %v, want ring.ErrAborted", err)
	}
	b.SetReadDeadline(time.Now().Add(time.Minute))
	got, err := io.ReadAll(b)
	if len(got) == 0 || len(got) >= len(msg) {
		t.Errorf("peer read %d of %d bytes", len(got), len(msg))
	}
	if !errors.Is(err, ring.ErrPeerGone) {
		t.Errorf("peer's Read after %d bytes = %v, want ring.ErrPeerGone", len(got), err)
	}
}

// TestSimBusyRsocketPeerIsNotDead: a C rsocket peer posts exactly RecvQueueSize
// receives and puts them back only when its application calls into the
// library. If it stays away while we send its credits' worth of DATA plus a
// message it does not credit, our send waits in RNR retries with no
// completion. The keepalive watchdog must not call that peer gone after
// keepaliveProbes periods, which would drop the written bytes; once the
// peer polls, every byte arrives.
func TestSimBusyRsocketPeerIsNotDead(t *testing.T) {
	ahead := fakeKeepaliveClock(t)
	const period = time.Hour // the real timer never fires in the test: the test ticks
	// One transfer per Write: the test needs more DATA messages than credits.
	set := testSettings(func(s *Settings) { s.KeepAlive, s.Ring.Autocork = period, false })
	peerCfg := ring.Config{RecvQueueSize: 16}.Normalize()
	f := simfabric.New(1, simfabric.Options{Auto: true, DirectLanding: true, RNRRetry: true})
	la, lb := set.Ring.Layout(), peerCfg.Layout()
	a, b := f.Pair(simfabric.Caps{SendDepth: la.SendDepth, RecvDepth: la.RecvDepth, MaxInline: 256},
		simfabric.Caps{SendDepth: lb.SendDepth, RecvDepth: lb.RecvDepth, MaxInline: 256})
	ea, err := ring.New(set.Ring, a.Register(make([]byte, la.SendRegion), false),
		a.Register(make([]byte, la.RecvRegion), true), a.Register(make([]byte, la.TargetRegion), true))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PostRecv(ea.PostRecvs(nil)); err != nil {
		t.Fatal(err)
	}
	eb, err := ring.New(peerCfg, b.Register(make([]byte, lb.SendRegion), false),
		b.Register(make([]byte, lb.RecvRegion), true), b.Register(make([]byte, lb.TargetRegion), true))
	if err != nil {
		t.Fatal(err)
	}
	// As rsocket: RecvQueueSize receives, no headroom; the rest go up later.
	peerRecvs := eb.PostRecvs(nil)
	if err := b.PostRecv(peerRecvs[:16]); err != nil {
		t.Fatal(err)
	}
	pa, pb := ea.LocalConnData(), eb.LocalConnData()
	pb[1] &^= ring.FlagRecvHeadroom // as rsocket's flags: no receives beyond the credits
	if err := ea.Establish(pb[:]); err != nil {
		t.Fatal(err)
	}
	if err := eb.Establish(pa[:]); err != nil {
		t.Fatal(err)
	}
	qa := simqp.New(a, clientAddr, serverAddr)
	qb := simqp.New(b, serverAddr, clientAddr)
	simqp.Connect(qa, qb)
	c := Start(qa, ea, set)
	defer c.Close()

	const writes = 20
	for i := range writes {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// More silence than keepaliveProbes periods, over two ticks, which
	// would end the connection to a peer that acknowledges nothing.
	tickPastTheBound(c, ahead, period)
	c.mu.Lock()
	fatal, stalls := c.fatal, c.keepaliveStalls
	c.mu.Unlock()
	if fatal != nil {
		t.Fatalf("the connection failed while the peer was busy: %v (fabric %+v)", fatal, f.Stats())
	}
	if stalls < minSilentTicks {
		t.Fatalf("%d silent ticks in a row, want %d: the test did not test it", stalls, minSilentTicks)
	}
	if f.Stats().RNRStalls == 0 {
		t.Fatalf("no RNR stall: the test did not test it (fabric %+v)", f.Stats())
	}

	// The peer's application calls in: receives go back, data is read.
	if err := b.PostRecv(peerRecvs[16:]); err != nil {
		t.Fatal(err)
	}
	wcs := make([]wr.Completion, lb.CQDepth)
	var got []byte
	buf := make([]byte, 64)
	deadline := time.Now().Add(time.Minute)
	for len(got) < writes {
		n := b.PollCQ(wcs)
		if err := eb.Complete(wcs[:n]); err != nil {
			t.Fatal(err)
		}
		if err := b.PostRecv(eb.PostRecvs(nil)); err != nil {
			t.Fatal(err)
		}
		if err := b.PostSend(eb.PostSends(nil)); err != nil {
			t.Fatal(err)
		}
		m, _ := eb.Read(buf)
		got = append(got, buf[:m]...)
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d bytes came after the peer polled", len(got), writes)
		}
		runtime.Gosched()
	}
	for i, x := range got {
		if x != byte(i) {
			t.Fatalf("byte %d = %d", i, x)
		}
	}
}

// TestSimZeroReadIgnoresDeadline: a zero-length Read returns 0, nil even
// past its deadline, as *net.TCPConn's does; once closed, net.ErrClosed.
func TestSimZeroReadIgnoresDeadline(t *testing.T) {
	a, b := simPipe(t, nil)
	defer b.Close()
	a.SetReadDeadline(time.Unix(1, 0))
	if n, err := a.Read(nil); n != 0 || err != nil {
		t.Errorf("zero-length Read past the deadline = %d, %v; want 0, nil", n, err)
	}
	a.Close()
	if _, err := a.Read(nil); !errors.Is(err, net.ErrClosed) {
		t.Errorf("zero-length Read after Close = %v, want net.ErrClosed", err)
	}
}

// TestSimStreamWaitStaysStreamWait: a Read that began waiting with no Write
// of ours before it is a streaming wait even if the connection writes while
// it waits; taking it for a reply wait fed a wait "since the zero time" into
// the reply estimate, saturating it toward the spin limit.
func TestSimStreamWaitStaysStreamWait(t *testing.T) {
	// Short keepalive periods: each tick drives the engine and wakes the
	// parked Read to look again.
	a, b := simPipe(t, func(s *Settings) { s.BusyPoll, s.KeepAlive = 0, time.Millisecond })
	defer a.Close()
	defer b.Close()
	// Each park is signalled, and the Read parks again after each wakeup
	// (it gets no data until the end), so every change of Stats.Parks,
	// counted as a wait ends, is followed by a signal.
	parking := make(chan struct{}, 1)
	simQPOf(a).Waiting = parking
	done := make(chan error, 1)
	go func() {
		_, err := a.Read(make([]byte, 1))
		done <- err
	}()
	parks := func() uint64 { return a.Stats().Parks }
	conntest.Signalled(t, "the Read to park and wake", parking, func() bool { return parks() > 0 })
	// A tick wakes the parked Read, which finds no data and waits again,
	// now with a Write since its last Read.
	if _, err := a.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	conntest.Signalled(t, "the Read to park and wake again", parking, func() bool { return parks() >= 2 })
	if _, err := io.ReadFull(b, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	avg := a.readWait.avg
	a.mu.Unlock()
	if avg != 0 {
		t.Errorf("reply-wait estimate %v after a streaming wait, want untouched", avg)
	}
}
