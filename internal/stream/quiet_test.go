package stream

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simqp"
)

// TestSimTickShrinksOnlyQuietRings: a tick that runs far later than its
// period (a thawed host's clock leapt), or that finds the peer silent,
// registers no region: shrinking an idle ring waits for a tick on time
// with the peer answering, which then does shrink it.
func TestSimTickShrinksOnlyQuietRings(t *testing.T) {
	var registered atomic.Int64
	testHookAddRegion = func(ring.RegionKind, int) error {
		registered.Add(1)
		return nil
	}
	defer func() { testHookAddRegion = nil }()
	ahead := fakeKeepaliveClock(t)
	const period = time.Hour // the real timer never fires in the test

	// grown returns a pipe whose first end has both rings grown by bulk
	// streams and nothing in flight.
	grown := func(t *testing.T) (c, s *Conn, hold *holdQP) {
		c, s = simPipeWrap(t, func(s *Settings) { s.KeepAlive = period }, func(q *simqp.QP) QueuePair {
			hold = &holdQP{QP: q}
			return hold
		})
		conntest.StreamChecked(t, c, s, 4<<20, 256<<10, 64<<10, 1)
		conntest.StreamChecked(t, s, c, 4<<20, 256<<10, 64<<10, 2)
		conntest.Until(t, "the streams' sends to complete", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.driveLocked()
			return c.eng.InFlight() == 0
		})
		if st := c.Stats(); st.SendRingSize <= ring.DefaultIdleBufSize || st.RecvRingSize <= ring.DefaultIdleBufSize {
			t.Fatalf("rings after the streams: send %d receive %d; the test needs both grown", st.SendRingSize, st.RecvRingSize)
		}
		return c, s, hold
	}
	// tickOnTime ticks a period after the last tick and returns how many
	// regions it registered. The first after grown finds bytes moved and
	// shrinks nothing; the next on time with the peer answering finds both
	// rings quiet.
	tickOnTime := func(c *Conn) int64 {
		registered.Store(0)
		ahead(period)
		c.tick()
		return registered.Load()
	}

	t.Run("Leap", func(t *testing.T) {
		c, s, _ := grown(t)
		defer s.Close()
		defer c.Close()
		tickOnTime(c)
		registered.Store(0)
		ahead(5 * period)
		c.tick()
		if n := registered.Load(); n != 0 {
			t.Fatalf("a tick %v after the last one registered %d regions", 5*period, n)
		}
		if n := tickOnTime(c); n == 0 {
			t.Fatal("the next tick on time shrank no ring: the test tests nothing")
		}
	})

	t.Run("SilentPeer", func(t *testing.T) {
		c, s, hold := grown(t)
		defer s.Close()
		defer c.Close()
		defer hold.release()
		// The peer falls silent before the first tick: the keepalive that
		// tick sends is never acknowledged either.
		hold.silence()
		tickOnTime(c)
		if _, err := c.Write([]byte("into the silence")); err != nil {
			t.Fatal(err)
		}
		if n := tickOnTime(c); n != 0 {
			t.Fatalf("a tick that found the peer silent registered %d regions", n)
		}
		if err := fatalOf(c); err != nil {
			t.Fatalf("one silent tick ended the connection: %v", err)
		}
		hold.release()
		conntest.Until(t, "the held sends to complete", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.driveLocked()
			return c.eng.InFlight() == 0
		})
		if n := tickOnTime(c); n == 0 {
			t.Fatal("a tick on time with the peer answering again shrank no ring: the test tests nothing")
		}
	})
}
