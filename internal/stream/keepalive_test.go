package stream

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/ring"
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
	var offset atomic.Int64 // how far the keepalive's clock is ahead
	base := time.Now()
	testHookNow = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	defer func() { testHookNow = nil }()
	const period = time.Hour // the real timer never fires in the test
	var hold *holdQP
	c, s := simPipeWrap(t, func(s *Settings) { s.KeepAlive = period }, func(q *simqp.QP) QueuePair {
		hold = &holdQP{QP: q}
		return hold
	})
	defer s.Close()
	defer c.Close()
	defer hold.release()
	late := func() { offset.Add(int64(keepaliveProbes*period + time.Second)) }

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
	hold.mu.Lock()
	hold.holding = true
	hold.mu.Unlock()
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
	offset.Add(int64(period))
	c.tick()
	err := fatalOf(c)
	if !errors.Is(err, ring.ErrPeerGone) {
		t.Fatalf("after %v of silence and two ticks the connection's error is %v, want ErrPeerGone", keepaliveProbes*period+period, err)
	}
}

func fatalOf(c *Conn) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}
