package rnet

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// floodCQ is a poll group's CQ that a peer keeps full. It holds queued
// first (what was in the CQ when the test began), then every poll finds
// the rest of a full batch of completions for floodQPNum, a queue pair of
// no member, as new completions would keep coming; after quietAfter polls
// the flood stops, so that a drain without a bound ends on a count the
// test can fail instead of hanging it.
type floodCQ struct {
	mu         sync.Mutex
	queued     []wr.Completion
	polls      int
	quietAfter int
	entries    int
	// onPoll, if set, is called with the poll's number after each poll,
	// with the group's pollMu held.
	onPoll func(poll int)

	intr     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
}

const floodQPNum = 99

func newFloodCQ(entries, quietAfter int) *floodCQ {
	return &floodCQ{entries: entries, quietAfter: quietAfter, intr: make(chan struct{}, 1), stop: make(chan struct{})}
}

func (c *floodCQ) poll(flags verbs.StepFlags, out []wr.Completion, tries int) (int, error) {
	c.mu.Lock()
	c.polls++
	poll := c.polls
	n := copy(out, c.queued)
	c.queued = c.queued[n:]
	if poll <= c.quietAfter {
		for ; n < len(out); n++ {
			out[n] = wr.Completion{ID: 1, QPNum: floodQPNum, Opcode: wr.WCRDMAWrite}
		}
	}
	onPoll := c.onPoll
	c.mu.Unlock()
	if onPoll != nil {
		onPoll(poll)
	}
	return n, nil
}

// pollCount returns how many polls were made so far.
func (c *floodCQ) pollCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.polls
}

// waitReady finds an event at once while the flood lasts.
func (c *floodCQ) waitReady() error {
	c.mu.Lock()
	flooding := c.polls < c.quietAfter
	c.mu.Unlock()
	if flooding {
		return nil
	}
	select {
	case <-c.intr:
		return errInterrupted
	case <-c.stop:
		return net.ErrClosed
	}
}

func (c *floodCQ) interrupt()     { notify(c.intr) }
func (c *floodCQ) shutdown()      { c.stopOnce.Do(func() { close(c.stop) }) }
func (c *floodCQ) destroy() error { return nil }
func (c *floodCQ) size() int      { return c.entries }

// TestGroupDrainIsBounded: a peer that keeps a poll group's CQ full makes
// no caller poll it for ever with pollMu held. A drain stops after
// maxStepRounds polls; collectAll, a leave and an attach poll until
// everything that was in the CQ when they began has been handed out (as
// many completions as the CQ holds, at most), letting go of the lock
// between drains; the leader hands out completions a bounded drain at a
// time and still answers a kick. Without the bounds each of them polls
// until the flood stops (here after floodPolls polls).
func TestGroupDrainIsBounded(t *testing.T) {
	const (
		entries    = 1024
		floodPolls = 20000
		memberQP   = 7
	)
	// The most polls a caller that must see the CQ's contents handed out
	// makes: the CQ's size in batches, and the rest of its last drain.
	collectBound := entries/completionBatch + maxStepRounds
	// newGroup returns a group over a full flooded CQ with one member,
	// whose three completions are the last ones in the CQ.
	newGroup := func(t *testing.T) (*pollGroup, *floodCQ, *groupMember) {
		cq := newFloodCQ(entries, floodPolls)
		for range entries - 3 {
			cq.queued = append(cq.queued, wr.Completion{ID: 1, QPNum: floodQPNum, Opcode: wr.WCRDMAWrite})
		}
		for i := range 3 {
			cq.queued = append(cq.queued, wr.Completion{ID: uint64(i), QPNum: memberQP, Opcode: wr.WCRDMAWrite})
		}
		g := newPollGroup(cq)
		m, ok := g.reserve(16, 16, 0)
		if !ok {
			t.Fatal("the group has no room for a member")
		}
		m.attach(memberQP)
		return g, cq, m
	}
	// within runs f, failing the test if it does not return in a minute.
	within := func(t *testing.T, what string, cq *floodCQ, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() {
			defer close(done)
			f()
		}()
		select {
		case <-done:
		case <-time.After(time.Minute): // a hang detector only
			t.Fatalf("%s did not return within a minute (%d polls so far)", what, cq.pollCount())
		}
	}

	t.Run("Drain", func(t *testing.T) {
		g, cq, _ := newGroup(t)
		within(t, "a drain", cq, func() {
			g.pollMu.Lock()
			g.armed = true
			g.drainLocked(verbs.StepArm)
			g.pollMu.Unlock()
		})
		if polls := cq.pollCount(); polls > maxStepRounds {
			t.Errorf("one drain polled %d times with pollMu held, more than %d", polls, maxStepRounds)
		}
		if g.armed {
			t.Error("a drain cut short left the CQ marked armed: the leader would park with completions no event announces")
		}
	})

	t.Run("CollectAll", func(t *testing.T) {
		g, cq, m := newGroup(t)
		within(t, "collectAll", cq, g.collectAll)
		if polls := cq.pollCount(); polls > collectBound {
			t.Errorf("collectAll polled %d times, more than %d", polls, collectBound)
		}
		if n := m.pending(); n != 3 {
			t.Errorf("after collectAll the member's inbox holds %d completions, want the 3 that were in the CQ", n)
		}
	})

	t.Run("Leader", func(t *testing.T) {
		_, cq, m := newGroup(t)
		const kickAt = 100
		cq.mu.Lock()
		cq.onPoll = func(poll int) {
			if poll == kickAt {
				m.kick()
			}
		}
		cq.mu.Unlock()
		within(t, "the leader's wait", cq, func() {
			// The member's own completions are handed to it on the
			// way: the wait may end for those first.
			out := make([]wr.Completion, 16)
			for cq.pollCount() < kickAt {
				if _, err := m.wait(); err != nil {
					t.Errorf("wait: %v", err)
					return
				}
				m.take(out)
			}
		})
		if polls := cq.pollCount(); polls > kickAt+maxStepRounds {
			t.Errorf("the leader answered a kick at poll %d after poll %d: more than a drain (%d polls) later",
				kickAt, polls, maxStepRounds)
		}
	})

	t.Run("Leave", func(t *testing.T) {
		g, cq, m := newGroup(t)
		keep, ok := g.reserve(16, 16, 0) // the group stays open
		if !ok {
			t.Fatal("the group has no room for a member")
		}
		keep.attach(memberQP + 1)
		within(t, "leave", cq, func() {
			if err := g.leave(m, nil); err != nil {
				t.Errorf("leave: %v", err)
			}
		})
		if polls := cq.pollCount(); polls > collectBound {
			t.Errorf("leave polled %d times, more than %d", polls, collectBound)
		}
		if n := m.pending(); n != 3 {
			t.Errorf("the leaving member was handed %d of the 3 completions its queue pair left in the CQ", n)
		}
	})

	t.Run("AttachAfterLeave", func(t *testing.T) {
		// A new queue pair of the number that just left (siw reuses
		// numbers at once) attaches while the leave is polling: the
		// completions the old one left are not handed to it.
		g, cq, m := newGroup(t)
		keep, ok := g.reserve(16, 16, 0)
		if !ok {
			t.Fatal("the group has no room for a member")
		}
		keep.attach(memberQP + 1)
		next, ok := g.reserve(16, 16, 0)
		if !ok {
			t.Fatal("the group has no room for a member")
		}
		attached := make(chan struct{})
		var once sync.Once
		cq.mu.Lock()
		cq.onPoll = func(int) {
			once.Do(func() {
				go func() {
					defer close(attached)
					next.attach(memberQP)
				}()
			})
		}
		cq.mu.Unlock()
		within(t, "leave and attach", cq, func() {
			if err := g.leave(m, nil); err != nil {
				t.Errorf("leave: %v", err)
			}
			<-attached
		})
		if n := next.pending(); n != 0 {
			t.Errorf("the new member was handed %d completions of the queue pair that left", n)
		}
		if n := m.pending(); n != 3 {
			t.Errorf("the leaving member was handed %d of the 3 completions its queue pair left in the CQ", n)
		}
		if polls := cq.pollCount(); polls > 2*collectBound {
			t.Errorf("leave and attach polled %d times, more than %d", polls, 2*collectBound)
		}
	})
}
