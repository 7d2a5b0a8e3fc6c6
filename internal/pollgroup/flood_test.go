package pollgroup

import (
	"net"
	"sync"
	"sync/atomic"
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

func (c *floodCQ) Poll(flags verbs.StepFlags, out []wr.Completion, tries int) (int, error) {
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
func (c *floodCQ) WaitReady() error {
	c.mu.Lock()
	flooding := c.polls < c.quietAfter
	c.mu.Unlock()
	if flooding {
		return nil
	}
	select {
	case <-c.intr:
		return ErrInterrupted
	case <-c.stop:
		return net.ErrClosed
	}
}

func (c *floodCQ) Interrupt()     { notify(c.intr) }
func (c *floodCQ) Shutdown()      { c.stopOnce.Do(func() { close(c.stop) }) }
func (c *floodCQ) Destroy() error { return nil }
func (c *floodCQ) Size() int      { return c.entries }

// stepBetweenDrains makes a spinning step of stepper, in a goroutine of
// its own, run each time a collection of g lets go of pollMu between two
// drains, the hook waiting for it: the step polls the CQ only if it takes
// pollMu at once, so it proves the lock free there and never blocks. It
// returns how often the collection let go and how many steps polled.
func stepBetweenDrains(t *testing.T, g *Group, cq *floodCQ, stepper *Member) (released, stepped *atomic.Int32) {
	released, stepped = new(atomic.Int32), new(atomic.Int32)
	stepper.qp.(*numQP).poll = func(out []wr.Completion, tries int) (int, error) {
		stepped.Add(1)
		return cq.Poll(0, out, tries)
	}
	hook := func(hg *Group) {
		if hg != g {
			return
		}
		released.Add(1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			stepper.Step(nil, nil, make([]wr.Completion, 16), 2)
		}()
		<-done
	}
	setHooks(t, &Hooks{BetweenDrains: hook})
	return released, stepped
}

// TestGroupDrainIsBounded: a peer that keeps a poll group's CQ full makes
// no caller poll it for ever with pollMu held. A drain stops after
// maxDrainRounds polls; collectAll, a leave and an attach poll until
// everything that was in the CQ when they began has been handed out (as
// many completions as the CQ holds, at most), letting go of the lock
// between drains; the leader hands out completions a bounded drain at a
// time and still answers a kick. Without the bounds each of them polls
// until the flood stops (here after floodPolls polls).
func TestGroupDrainIsBounded(t *testing.T) {
	const (
		// entries is four bounded drains' worth, so that a collection
		// lets go of pollMu between drains several times.
		entries    = 4 * maxDrainRounds * batch
		floodPolls = 20000
		memberQP   = 7
		// memberRecvs is how many receives of the shared queue the
		// member posted: its completions in the CQ consume them.
		memberRecvs = 3
	)
	// The most polls a caller that must see the CQ's contents handed out
	// makes: the CQ's size in batches (splitPolls times: a split CQ's two
	// halves, each with at least half of every batch), and the rest of
	// its last drain.
	collectBound := splitPolls*entries/batch + maxDrainRounds
	// newGroup returns a group over a full flooded CQ with one member,
	// whose three completions are the last ones in the CQ, so that the
	// last drain of a collection hands them out. With rq, the group has a
	// shared receive queue and they are receive completions.
	newGroup := func(t *testing.T, rq *countingRQ) (*Group, *floodCQ, *Member) {
		cq := newFloodCQ(entries, floodPolls)
		for range entries - 3 {
			cq.queued = append(cq.queued, wr.Completion{ID: 1, QPNum: floodQPNum, Opcode: wr.WCRDMAWrite})
		}
		for i := range 3 {
			wc := wr.Completion{ID: uint64(i), QPNum: memberQP, Opcode: wr.WCRDMAWrite}
			if rq != nil {
				wc = recvCompletions(memberQP, 1)[0]
			}
			cq.queued = append(cq.queued, wc)
		}
		g := New(cq, nil)
		if rq != nil {
			if err := g.ShareRecvs(rq, 64); err != nil {
				t.Fatal(err)
			}
		}
		m, ok := g.Reserve(16, 16, memberRecvs)
		if !ok {
			t.Fatal("the group has no room for a member")
		}
		m.Attach(&numQP{num: memberQP}, nil)
		if rq != nil {
			m.accountRecvs(make([]wr.Recv, memberRecvs))
		}
		return g, cq, m
	}
	// join adds a member of queue pair qpNum to g.
	join := func(t *testing.T, g *Group, qpNum uint32) *Member {
		t.Helper()
		m, ok := g.Reserve(16, 16, 0)
		if !ok {
			t.Fatal("the group has no room for a member")
		}
		m.Attach(&numQP{num: qpNum}, nil)
		return m
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
	// checkReleased checks that a collection let go of pollMu between drains
	// several times and that a member's step polled the CQ each time.
	checkReleased := func(t *testing.T, what string, released, stepped *atomic.Int32) {
		t.Helper()
		if r := released.Load(); r < 2 {
			t.Errorf("%s let go of pollMu between drains %d times, want several: the CQ holds %d bounded drains", what, r, entries/(maxDrainRounds*batch))
		}
		if r, s := released.Load(), stepped.Load(); s != r {
			t.Errorf("%s came between drains %d times, but a member's step could take pollMu and poll there only %d times", what, r, s)
		}
	}

	t.Run("Drain", func(t *testing.T) {
		g, cq, _ := newGroup(t, nil)
		within(t, "a drain", cq, func() {
			g.pollMu.Lock()
			g.armed = true
			g.drainLocked(verbs.StepArm)
			g.pollMu.Unlock()
		})
		if polls := cq.pollCount(); polls > maxDrainRounds {
			t.Errorf("one drain polled %d times with pollMu held, more than %d", polls, maxDrainRounds)
		}
		if g.armed {
			t.Error("a drain cut short left the CQ marked armed: the leader would park with completions no event announces")
		}
	})

	t.Run("CollectAll", func(t *testing.T) {
		g, cq, m := newGroup(t, nil)
		stepper := join(t, g, memberQP+1)
		released, stepped := stepBetweenDrains(t, g, cq, stepper)
		within(t, "collectAll", cq, g.collectAll)
		checkReleased(t, "collectAll", released, stepped)
		if polls := cq.pollCount(); polls > collectBound {
			t.Errorf("collectAll polled %d times, more than %d", polls, collectBound)
		}
		if n := m.pending(); n != 3 {
			t.Errorf("after collectAll the member's inbox holds %d completions, want the 3 that were in the CQ", n)
		}
	})

	t.Run("Leader", func(t *testing.T) {
		_, cq, m := newGroup(t, nil)
		const kickAt = 100
		cq.mu.Lock()
		cq.onPoll = func(poll int) {
			if poll == kickAt {
				m.Kick()
			}
		}
		cq.mu.Unlock()
		within(t, "the leader's wait", cq, func() {
			// The member's own completions are handed to it on the
			// way: the wait may end for those first.
			out := make([]wr.Completion, 16)
			for cq.pollCount() < kickAt {
				if _, err := m.Wait(); err != nil {
					t.Errorf("wait: %v", err)
					return
				}
				m.take(out)
			}
		})
		if polls := cq.pollCount(); polls > kickAt+maxDrainRounds {
			t.Errorf("the leader answered a kick at poll %d after poll %d: more than a drain (%d polls) later",
				kickAt, polls, maxDrainRounds)
		}
	})

	t.Run("Leave", func(t *testing.T) {
		g, cq, m := newGroup(t, nil)
		keep := join(t, g, memberQP+1) // the group stays open
		released, stepped := stepBetweenDrains(t, g, cq, keep)
		within(t, "leave", cq, func() {
			if err := g.leave(m, nil); err != nil {
				t.Errorf("leave: %v", err)
			}
		})
		checkReleased(t, "leave", released, stepped)
		if polls := cq.pollCount(); polls > collectBound {
			t.Errorf("leave polled %d times, more than %d", polls, collectBound)
		}
		if n := m.pending(); n != 3 {
			t.Errorf("the leaving member was handed %d of the 3 completions its queue pair left in the CQ", n)
		}
	})

	t.Run("AttachAfterLeave", func(t *testing.T) {
		// A new queue pair of the number that just left (siw reuses
		// numbers at once) attaches while the leave is collecting: it
		// starts when the leave first lets go of pollMu and finishes
		// before the leave takes it again, and the completions the old
		// one left, last in the CQ, are not handed to it. The group
		// shares receives, so a completion handed to the wrong member
		// shows in the accounts.
		rq := &countingRQ{}
		g, cq, m := newGroup(t, rq)
		join(t, g, memberQP+1) // the group stays open
		next, ok := g.Reserve(16, 16, 0)
		if !ok {
			t.Fatal("the group has no room for a member")
		}
		posted := rq.posted
		var (
			launched  atomic.Bool // the hook started the attach
			awaiting  atomic.Bool // the hook waits for the attach's first poll
			polled    = make(chan struct{})
			resume    = make(chan struct{})
			attached  = make(chan struct{})
			heldThen  int // the leaving member's completions when attach returned
			nextFirst int // the new member's completions then
		)
		// The attach's first poll, with pollMu held, stops until the
		// hook has seen that the attach is collecting, not done.
		cq.mu.Lock()
		cq.onPoll = func(int) {
			if awaiting.CompareAndSwap(true, false) {
				polled <- struct{}{}
				<-resume
			}
		}
		cq.mu.Unlock()
		hook := func(hg *Group) {
			if hg != g || !launched.CompareAndSwap(false, true) {
				return
			}
			free := g.pollMu.TryLock()
			if free {
				g.pollMu.Unlock()
				awaiting.Store(true)
			} else {
				t.Error("the leave called the hook between drains with pollMu held")
			}
			go func() {
				defer close(attached)
				next.Attach(&numQP{num: memberQP}, nil)
				heldThen, nextFirst = m.pending(), next.pending()
			}()
			if !free {
				return
			}
			select {
			case <-polled:
				// The attach collects the rest while the leave waits
				// here, so the leave then finds the number taken.
				close(resume)
				<-attached
			case <-attached:
				awaiting.Store(false)
				close(resume)
				t.Error("an attach that began while the leave was collecting returned without polling: it did not wait for the leaver's completions")
			}
		}
		setHooks(t, &Hooks{BetweenDrains: hook})

		within(t, "leave", cq, func() {
			if err := g.leave(m, nil); err != nil {
				t.Errorf("leave: %v", err)
			}
		})
		if !launched.Load() {
			t.Fatal("the leave never let go of pollMu between drains: no attach could start while it collected")
		}
		within(t, "attach", cq, func() { <-attached })
		if heldThen != 3 || nextFirst != 0 {
			t.Errorf("when the attach returned the leaving member held %d of its 3 completions and the new one %d, want 3 and 0: the attach did not wait for the leave's collection",
				heldThen, nextFirst)
		}
		if n := next.pending(); n != 0 {
			t.Errorf("the new member was handed %d completions of the queue pair that left", n)
		}
		if n := m.pending(); n != 3 {
			t.Errorf("the leaving member was handed %d of the 3 completions its queue pair left in the CQ", n)
		}
		g.pollMu.Lock()
		now := g.members[memberQP]
		g.pollMu.Unlock()
		if now != next {
			t.Error("after the leave the new member does not hold its queue pair number: the leave took it out")
		}
		if out := next.recvOut.Load(); out != 0 {
			t.Errorf("the new member's queue pair consumed %d receives of the shared queue, want none", -out)
		}
		if b, o := g.srq.balance.Load(), g.srq.overruns.Load(); b != 0 || o != 0 || rq.posted != posted {
			t.Errorf("after the leave the shared queue's balance is %d with %d overruns and %d receives posted back, want 0, 0, 0: the leaver's receive completions were not accounted to it",
				b, o, rq.posted-posted)
		}
		if polls := cq.pollCount(); polls > 2*collectBound {
			t.Errorf("leave and attach polled %d times, more than %d", polls, 2*collectBound)
		}
	})
}
