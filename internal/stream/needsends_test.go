package stream

import (
	"sync"
	"testing"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/ring"
)

// needQP is an armedQP that records what the Conn last told it of its need
// for send completions, and whether a Wait began.
type needQP struct {
	*armedQP
	nmu     sync.Mutex
	need    bool
	waiting bool
}

func (q *needQP) NeedSends(need bool) { q.nmu.Lock(); q.need = need; q.nmu.Unlock() }

func (q *needQP) Wait() (bool, error) {
	q.nmu.Lock()
	q.waiting = true
	q.nmu.Unlock()
	return q.armedQP.Wait()
}

// TestWriteBlockedOnFullRingNeedsSends: a Write that finds the send ring
// full of posted transfers, whose completions alone bring room back, queues
// behind a Read that owns the wait; by then the Conn must have told its
// queue pair that it needs send completions, or nothing wakes the Read's
// wait when they come (a poll group leaves its CQ's send half unarmed).
func TestWriteBlockedOnFullRingNeedsSends(t *testing.T) {
	set := testSettings(func(s *Settings) {
		s.Linger, s.BusyPoll, s.KeepAlive = 0, 0, 0
		s.BusyPollLimit, s.BusyPollLimitMax = 0, 0
		s.Ring.Autocork = false
	})
	peerSet := set
	peerSet.Ring.IdleBufferSize = 4 * set.Ring.IdleBufferSize
	peerSet.Ring.RecvBufferSize = 4 * set.Ring.RecvBufferSize
	peerSet.Ring = peerSet.Ring.Normalize()
	newEngine := func(cfg Settings, base uint64) *ring.Engine {
		layout := cfg.Ring.Layout()
		region := func(off uint64, n int) ring.Region {
			return ring.Region{Buf: make([]byte, n), Addr: base + off, LKey: 1, RKey: 2}
		}
		e, err := ring.New(cfg.Ring, region(0, layout.SendRegion), region(1<<30, layout.RecvRegion), region(2<<30, layout.TargetRegion))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	eng, peer := newEngine(set, 1<<40), newEngine(peerSet, 2<<40)
	pe := peer.LocalConnData()
	if err := eng.Establish(pe[:]); err != nil {
		t.Fatal(err)
	}
	q := &needQP{armedQP: newArmedQP(eng)} // its sends never complete
	c := Start(q, eng, set)
	defer c.Close()
	c.mu.Lock()
	space := c.eng.SendSpace()
	c.mu.Unlock()
	if n, err := c.Write(make([]byte, space)); n != space || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	c.mu.Lock()
	blocked, left := c.eng.Blocked(), c.eng.SendSpace()
	c.mu.Unlock()
	if blocked || left != 0 {
		t.Fatalf("after filling the ring: Blocked %v, SendSpace %d; want a full ring with every byte posted", blocked, left)
	}
	go c.Read(make([]byte, 1))
	conntest.Until(t, "the Read to wait", func() bool {
		q.nmu.Lock()
		defer q.nmu.Unlock()
		return q.waiting
	})
	go c.Write([]byte{1})
	conntest.Until(t, "the Write to queue behind the Read", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.queued == 1
	})
	q.nmu.Lock()
	need := q.need
	q.nmu.Unlock()
	if !need {
		t.Fatal("a Write parked waiting for room freed by send completions, and NeedSends(true) was never called")
	}
}
