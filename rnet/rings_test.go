package rnet

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/ring"
)

// driveUntil steps c's engine, polling its completions, until cond holds.
func driveUntil(t *testing.T, c *Conn, what string, cond func(Stats) bool) {
	t.Helper()
	conntest.Until(t, what, func() bool {
		c.conn.Drive()
		return cond(c.Stats())
	})
}

// quietTicks runs the connection's tick, which tells the engine of a quiet
// spell, until cond holds: the first tick after traffic only notes it.
func quietTicks(t *testing.T, c *Conn, what string, cond func(Stats) bool) {
	t.Helper()
	conntest.Until(t, what, func() bool {
		c.conn.Tick()
		return cond(c.Stats())
	})
}

// testRingsGrowAndShrink streams bulk data from a to b, which grows a's
// send ring and b's receive ring to the maximum, then lets both go quiet:
// a's send ring shrinks at once, b's receive ring once a has used the
// grants it holds. Every byte is checked; sizes are read from Stats.
func testRingsGrowAndShrink(t *testing.T, a, b *Conn) {
	idle, max := ring.DefaultIdleBufSize, ring.DefaultBufSize
	if s, r := a.Stats().SendRingSize, b.Stats().RecvRingSize; s != idle || r != idle {
		t.Fatalf("rings start at send %d receive %d, want %d", s, r, idle)
	}
	// Writes larger than the largest ring: each finds the ring too small
	// until it is at its maximum, however fast the peer reads.
	conntest.StreamChecked(t, a, b, 16<<20, 2*max, 64<<10, 1)
	// The last move may wait for the stream's last completions.
	driveUntil(t, a, "the writer's send ring to reach its maximum", func(s Stats) bool { return s.SendRingSize == max })
	if s := b.Stats(); s.RecvRingSize != max || s.RingGrowths == 0 {
		t.Fatalf("reader after a bulk stream: receive ring %d, growths %d; want %d", s.RecvRingSize, s.RingGrowths, max)
	}

	quietTicks(t, a, "the quiet writer's send ring to shrink", func(s Stats) bool { return s.SendRingSize == idle })
	quietTicks(t, b, "the quiet reader to ask for a small receive ring", func(s Stats) bool {
		return recvShrinkPending(b)
	})
	shrinks := b.Stats().RingShrinks
	// The writer holds both halves of the large ring: a trickle fills
	// them, and the next grant comes from the small ring.
	conntest.StreamChecked(t, a, b, 512<<10, 1000, 1000, 2)
	if s := b.Stats(); s.RingShrinks <= shrinks {
		t.Fatalf("reader's receive ring did not shrink: %+v", s)
	}
	if s := a.Stats(); s.RegionsDeclined != 0 || b.Stats().RegionsDeclined != 0 {
		t.Fatalf("regions declined: writer %d reader %d", s.RegionsDeclined, b.Stats().RegionsDeclined)
	}
}

// recvShrinkPending reports that c's engine holds a smaller receive region
// for its next grant.
func recvShrinkPending(c *Conn) bool {
	return c.conn.RecvShrinkPending()
}

func TestSimRingsGrowAndShrink(t *testing.T) {
	a, b := simPipe(t, nil)
	defer a.Close()
	defer b.Close()
	testRingsGrowAndShrink(t, a, b)
	for _, c := range []*Conn{a, b} {
		// Send, receive, target, and perhaps a ring still to move to.
		if n := simQPOf(c).Endpoint().Regions(); n < 3 || n > 5 {
			t.Errorf("%d regions registered", n)
		}
	}
}
