package stream

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/simqp"
)

// TestSimKeepaliveCountsTime: a peer goes silent (its device takes our
// sends and never acknowledges them, as rxe retrying without limit does)
// and our process runs its keepalive tick only after three periods, as
// one starved by the device's resends does. That late tick ends nothing:
// the clock may have leapt (a paused host) with the device paused too. The
// next tick, a period later, ends the connection with ErrPeerGone: the
// bound is keepaliveProbes periods of silence, not that many ticks. Late
// ticks that find sends completing end nothing.
func TestSimKeepaliveCountsTime(t *testing.T) {
	ahead := fakeKeepaliveClock(t)
	const period = time.Hour // the real timer never fires in the test
	c, _, hold := silentPeerPipe(t, period)
	late := func() { ahead(keepaliveProbes*period + time.Second) }

	// Live: sends complete between the late ticks.
	for range 2 {
		if _, err := c.Write([]byte("alive")); err != nil {
			t.Fatal(err)
		}
		late()
		c.tick()
		if err := fatalOf(c); err != nil {
			t.Fatalf("a late tick with sends completing ended the connection: %v", err)
		}
	}

	// Silent: what we send from now on is never acknowledged. A tick sees
	// the last completions first.
	conntest.Until(t, "the live sends to complete", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.driveLocked()
		return c.eng.InFlight() == 0
	})
	hold.silence()
	c.tick()
	if _, err := c.Write([]byte("into the silence")); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	inFlight := c.eng.InFlight()
	c.mu.Unlock()
	if inFlight == 0 {
		t.Fatal("nothing in flight: the test tests nothing")
	}
	late()
	c.tick()
	if err := fatalOf(c); err != nil {
		t.Fatalf("the first tick after a leap of the clock ended the connection: %v", err)
	}
	ahead(period)
	c.tick()
	err := fatalOf(c)
	if !errors.Is(err, ring.ErrPeerGone) {
		t.Fatalf("after %v of silence and two ticks the connection's error is %v, want ErrPeerGone", keepaliveProbes*period+period, err)
	}
}

// TestSimKeepaliveGivingUpTellsThePeer: once the keepalive has given up on
// a silent peer, our queue pair is down and the peer is told, before our
// application closes the connection, as a TCP connection that times out is
// closed. A peer that comes back (a host that thaws) then finds the
// connection over, where before its sends were acknowledged by a queue
// pair whose connection had ended, which kept its own keepalive from
// ending its side until we closed ours.
func TestSimKeepaliveGivingUpTellsThePeer(t *testing.T) {
	ahead := fakeKeepaliveClock(t)
	const period = time.Hour // the real timer never fires in the test
	c, s, hold := silentPeerPipe(t, period)

	// Our sends go unacknowledged from now on, though the peer is there:
	// what a thawing host's peer looks like to it.
	hold.silence()
	if _, err := c.Write([]byte("into the silence")); err != nil {
		t.Fatal(err)
	}
	tickPastTheBound(c, ahead, period)
	if err := fatalOf(c); !errors.Is(err, ring.ErrPeerGone) {
		t.Fatalf("after the keepalive's bound of silence the connection's error is %v, want ErrPeerGone", err)
	}

	peerToldOfTheEnd(t, s)
}

// peerToldOfTheEnd fails t unless s's Reads end with ErrPeerGone, within
// the tests' bound, while the connection's other end is still open.
func peerToldOfTheEnd(t *testing.T, s *Conn) {
	t.Helper()
	ended := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := s.Read(buf); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if !errors.Is(err, ring.ErrPeerGone) {
			t.Fatalf("the peer's Read ended with %v, want ErrPeerGone", err)
		}
	case <-time.After(conntest.Timeout(t)):
		t.Fatal("the peer was not told that the connection ended while it stayed open on our side")
	}
}

// silentPeerPipe is a connection c to s whose sends the peer takes and,
// once hold.silence is called, never acknowledges, with keepalives every
// period; the test's cleanup closes both.
func silentPeerPipe(t *testing.T, period time.Duration) (c, s *Conn, hold *holdQP) {
	t.Helper()
	c, s = simPipeWrap(t, func(s *Settings) { s.KeepAlive = period }, func(q *simqp.QP) QueuePair {
		hold = &holdQP{QP: q}
		return hold
	})
	t.Cleanup(func() { s.Close() })
	t.Cleanup(func() { c.Close() })
	t.Cleanup(hold.release)
	return c, s, hold
}

// tickPastTheBound runs c's keepalive through more silence than its bound,
// over two ticks after the first, moving the clock with ahead: what ends
// a connection whose sends go unacknowledged meanwhile.
func tickPastTheBound(c *Conn, ahead func(time.Duration), period time.Duration) {
	c.tick()
	ahead(keepaliveProbes*period + time.Second)
	c.tick()
	ahead(period)
	c.tick()
}

// fakeKeepaliveClock makes the keepalive read a clock that runs with the
// real one until the test moves it ahead with the function it returns, as
// a host's clock leaps over a pause.
func fakeKeepaliveClock(t testing.TB) (ahead func(time.Duration)) {
	var offset atomic.Int64
	base := time.Now()
	testHookNow = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	t.Cleanup(func() { testHookNow = nil })
	return func(d time.Duration) { offset.Add(int64(d)) }
}

func fatalOf(c *Conn) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

// TestSimKeepaliveBusyPeerAllowance: we use up the peer's credits, a
// SHUTDOWN that no credit covers follows, and the peer goes silent. A C
// rsocket peer (private data without ring.FlagRecvHeadroom) may only lack
// receives, its application away, and gets keepaliveProbesBusyPeer periods;
// an rnet peer keeps receives beyond its credits for such messages, so its
// silence ends the connection after keepaliveProbes, as for any peer whose
// host froze.
func TestSimKeepaliveBusyPeerAllowance(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cPeer  bool
		probes int
	}{
		{"C rsocket peer", true, keepaliveProbesBusyPeer},
		{"rnet peer", false, keepaliveProbes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testKeepaliveBusyPeerAllowance(t, tc.cPeer, tc.probes)
		})
	}
}

func testKeepaliveBusyPeerAllowance(t *testing.T, cPeer bool, probes int) {
	ahead := fakeKeepaliveClock(t)
	const period = time.Hour // the real timer never fires in the test
	set := testSettings(func(s *Settings) {
		s.KeepAlive = period
		s.Ring.Autocork = false // one DATA message per Write
		s.Ring.RecvQueueSize = 16
	})
	a, b := simPairPeerFlags(t, set.Ring, cPeer)
	hold := &holdQP{QP: a.QP}
	c, s := Start(hold, a.Engine, set), Start(b.QP, b.Engine, set)
	defer s.Close()
	defer c.Close()
	defer hold.release()

	// The peer's first SGL update is a grant: from it on, our control
	// messages count.
	conntest.Until(t, "the handshake's SGL updates to complete", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.driveLocked()
		return c.eng.InFlight() == 0 && c.eng.Stats().CreditUpdatesReceived == 1
	})
	hold.silence()
	c.tick()
	credits := c.eng.Credits()
	for i := range credits {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	inFlight, left, mayLack := c.eng.InFlight(), c.eng.Credits(), c.eng.PeerMayLackReceives()
	c.mu.Unlock()
	if inFlight != 1+credits+1 || left != 0 {
		t.Fatalf("%d sends in flight, %d credits left; want the tick's keepalive, the %d DATA messages and the SHUTDOWN, and none",
			inFlight, left, credits)
	}
	if mayLack != cPeer {
		t.Fatalf("PeerMayLackReceives = %v with a SHUTDOWN beyond the credits; want %v", mayLack, cPeer)
	}

	// The first tick after a leap ends nothing; the next, a period later,
	// ends the connection to an rnet peer, and one after the busy
	// allowance to a C peer.
	ahead(keepaliveProbes*period + time.Second)
	c.tick()
	if err := fatalOf(c); err != nil {
		t.Fatalf("the first tick after a leap of the clock ended the connection: %v", err)
	}
	ahead(period)
	c.tick()
	if probes == keepaliveProbes {
		if err := fatalOf(c); !errors.Is(err, ring.ErrPeerGone) {
			t.Fatalf("after %v of silence and two ticks the connection's error is %v, want ErrPeerGone",
				keepaliveProbes*period+period, err)
		}
		return
	}
	if err := fatalOf(c); err != nil {
		t.Fatalf("a busy C peer was given up after %v of silence: %v", keepaliveProbes*period+period, err)
	}
	ahead(time.Duration(probes-keepaliveProbes) * period)
	c.tick()
	if err := fatalOf(c); !errors.Is(err, ring.ErrPeerGone) {
		t.Fatalf("after %d periods of silence the connection's error is %v, want ErrPeerGone", probes+1, err)
	}
}

// simPairPeerFlags is simqp.Pair, except that with cPeer the first end
// reads the second's private data without ring.FlagRecvHeadroom, as a C
// rsocket peer's.
func simPairPeerFlags(t *testing.T, cfg ring.Config, cPeer bool) (a, b simqp.End) {
	t.Helper()
	layout := cfg.Layout()
	caps := simfabric.Caps{SendDepth: layout.SendDepth, RecvDepth: layout.RecvDepth, MaxInline: 256}
	f := simfabric.New(1, simfabric.Options{Auto: true, DirectLanding: true})
	epa, epb := f.Pair(caps, caps)
	var err error
	if a.Engine, err = simqp.NewEngine(cfg, epa); err != nil {
		t.Fatal(err)
	}
	if b.Engine, err = simqp.NewEngine(cfg, epb); err != nil {
		t.Fatal(err)
	}
	pa, pb := a.Engine.LocalConnData(), b.Engine.LocalConnData()
	if cPeer {
		pb[1] &^= ring.FlagRecvHeadroom // the flags byte
	}
	if err := a.Engine.Establish(pb[:]); err != nil {
		t.Fatal(err)
	}
	if err := b.Engine.Establish(pa[:]); err != nil {
		t.Fatal(err)
	}
	a.QP, b.QP = simqp.New(epa, clientAddr, serverAddr), simqp.New(epb, serverAddr, clientAddr)
	simqp.Connect(a.QP, b.QP)
	return a, b
}
