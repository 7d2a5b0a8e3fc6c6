//go:build linux && cgo

package rnet

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// TestRXERingsGrowAndShrink: an rnet->rnet bulk stream grows the writer's
// send ring and the reader's receive ring to their maximum on a device,
// quiet ticks shrink them again, every byte is checked, both ways round;
// after Close every memory region is deregistered.
func TestRXERingsGrowAndShrink(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	c1, c2 := rxeMaker(pair, nil)(t)
	logPinned(t, "idle", c1)
	t.Run("DialerWrites", func(t *testing.T) { testRingsGrowAndShrink(t, c1, c2) })
	t.Run("ListenerWrites", func(t *testing.T) {
		// c2's send ring and c1's receive ring are still at their idle
		// size: c2 only read, c1 only wrote.
		testRingsGrowAndShrink(t, c2, c1)
	})
	logPinned(t, "after both ways", c1)
	for _, c := range []*Conn{c1, c2} {
		if n := len(registeredRegions(c)); n < 3 || n > 5 {
			t.Errorf("%v: %d memory regions registered", c.LocalAddr(), n)
		}
	}
	c1.Close()
	c2.Close()
	checkReleased(t, gor0, fds0, res0)
}

// registeredRegions returns a device connection's memory regions as
// registered now.
func registeredRegions(c *Conn) []*verbs.MR {
	q, ok := c.conn.QueuePair().(*verbsQP) // QueuePair takes the Conn's lock itself
	if !ok {
		return nil
	}
	var mrs []*verbs.MR
	c.conn.WhileLocked(func() { // q.mrs changes under the Conn's lock
		mrs = append(mrs, q.mrs...)
	})
	return mrs
}

// logPinned logs the lengths of c's memory regions as registered (whole
// pages, as rdma resource show mr reports them) and their sum.
func logPinned(t *testing.T, when string, c *Conn) {
	total := 0
	var lens []int
	for _, mr := range registeredRegions(c) {
		lens = append(lens, pages(mr.Len()))
		total += pages(mr.Len())
	}
	t.Logf("%s: %v registers %v bytes, %d in all", when, c.LocalAddr(), lens, total)
}
