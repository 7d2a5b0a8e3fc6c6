package ring_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/wr"
)

// b's device is removed (simfabric's FailLosingCompletions) after a's
// 1000 bytes landed at b and b's 1000 bytes reached a, before b polled a
// completion: b's receive of a's bytes and its own send's completion are
// lost. b names the loss (not a completion out of sequence), and its send
// stays in flight for ever, so TakeOver could never run, until the driver
// destroys the queue pair and says so (QueuePairDestroyed). The connection
// then resumes: a sends its 1000 bytes again, and both streams end whole.
func TestTakeOverAfterDeviceRemoval(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{})
	cfg := ring.Config{RetainUntilReceived: true}
	a, b := connect(t, f, cfg, cfg)
	c := &failedConn{r: rand.New(rand.NewPCG(1, 43)), cfgs: [2]ring.Config{cfg, cfg}, sides: [2]*side{a, b}}
	for i, s := range c.sides {
		st := &stream{salt: uint64(i+1) << 40, total: 3000, wbuf: make([]byte, 1000), rbuf: make([]byte, 1<<17)}
		c.streams[i] = st
		if n, err := s.eng.Write(st.fill(1000)); n != 1000 || err != nil {
			t.Fatal(n, err)
		}
		st.written = 1000
		if _, err := s.service(len(s.wcs)); err != nil {
			t.Fatal(err)
		}
	}
	for f.Pending() {
		f.Step()
	}
	if lost := b.ep.FailLosingCompletions(wr.WCGeneralErr); lost < 2 {
		t.Fatalf("%d completions lost, want b's receive and send", lost)
	}
	for round := 0; round < 3 && a.eng.Err() == nil; round++ {
		a.eng.Keepalive() // the driver's timer
		drain(t, f, c.sides)
	}
	err := b.eng.Err()
	if !errors.Is(err, ring.ErrCompletionsLost) || errors.Is(err, ring.ErrUnknownCompletion) {
		t.Fatalf("b's error %v, want ErrCompletionsLost", err)
	}
	t.Logf("b: %v", err)
	if b.eng.InFlight() == 0 || a.eng.InFlight() != 0 || a.eng.Err() == nil {
		t.Fatalf("in flight: a %d, b %d (want b's lost send); a's error %v", a.eng.InFlight(), b.eng.InFlight(), a.eng.Err())
	}
	if held, err := resume.HeldBy(b.eng); err == nil {
		t.Fatalf("HeldBy with a send in flight: %+v", held)
	}
	b.eng.QueuePairDestroyed()
	b.check(t)
	if b.eng.InFlight() != 0 || b.eng.Err() != err || b.eng.StreamCounts().Received != 0 {
		t.Fatalf("after QueuePairDestroyed: %d in flight, error %v, received %d", b.eng.InFlight(), b.eng.Err(), b.eng.StreamCounts().Received)
	}
	if n := b.ep.PollCQ(b.wcs); n != 0 {
		t.Fatalf("%d completions after the drain", n)
	}
	plans := c.resumeToEOF(t, 1, false)
	if plans[0].From != 0 || plans[1].From != 1000 {
		t.Fatalf("resends %+v, want a's bytes from 0 and none of b's", plans)
	}
}

// QueuePairDestroyed on a live engine fails it (its receives are gone),
// and Complete ignores whatever the destroyed queue pair's CQ still
// yields; on an engine whose connection ended cleanly it changes nothing.
func TestQueuePairDestroyed(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{})
	a, _ := connect(t, f, ring.Config{}, ring.Config{})
	if n, err := a.eng.Write([]byte("hello")); n != 5 || err != nil {
		t.Fatal(n, err)
	}
	if _, err := a.service(len(a.wcs)); err != nil {
		t.Fatal(err)
	}
	a.eng.QueuePairDestroyed()
	if err := a.eng.Err(); !errors.Is(err, ring.ErrCompletionsLost) || a.eng.InFlight() != 0 {
		t.Fatalf("error %v, %d in flight", err, a.eng.InFlight())
	}
	a.check(t)
	for f.Pending() {
		f.Step()
	}
	n := a.ep.PollCQ(a.wcs)
	if err := a.eng.Complete(a.wcs[:n]); !errors.Is(err, ring.ErrCompletionsLost) || a.eng.Stats().SendCompletions != 0 {
		t.Fatalf("after %d stale completions: %v, %+v", n, err, a.eng.Stats())
	}

	// Two engines that closed cleanly: nothing is lost.
	f2 := simfabric.New(2, simfabric.Options{})
	b2, c2 := connect(t, f2, ring.Config{}, ring.Config{})
	b2.eng.CloseWrite()
	c2.eng.CloseWrite()
	drain(t, f2, [2]*side{b2, c2})
	if !b2.eng.Finished() || b2.eng.Err() != nil {
		t.Fatalf("finished %v, %v", b2.eng.Finished(), b2.eng.Err())
	}
	b2.eng.QueuePairDestroyed()
	if err := b2.eng.Err(); err != nil {
		t.Fatalf("a cleanly closed engine fails: %v", err)
	}
}

// TestTakeOverResumesStreamsOnFreshQueuePair with the failed end's device
// removed: the completions it had not polled are lost, its queue pair is
// destroyed, and the connection still resumes with every byte once, in
// order. Some seeds must lose completions, and some leave sends in flight
// that only QueuePairDestroyed ends, or the test proves nothing.
func TestTakeOverAfterDeviceRemovalMidStream(t *testing.T) {
	var lost, stuck atomic.Int64
	t.Run("seeds", func(t *testing.T) {
		for seed := uint64(1); seed <= 60; seed++ {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
				t.Parallel()
				c := failMidStreamWith(t, seed, true)
				lost.Add(int64(c.lost))
				stuck.Add(int64(c.stuck))
				for _, st := range c.streams {
					if st.total == 1<<40 {
						st.total = st.written + uint64(c.r.IntN(300<<10))
					}
				}
				c.resumeToEOF(t, seed, c.r.IntN(2) == 0)
			})
		}
	})
	if lost.Load() == 0 || stuck.Load() == 0 {
		t.Fatalf("%d completions lost, %d sends left in flight: the test proves nothing", lost.Load(), stuck.Load())
	}
	t.Logf("%d completions lost, %d sends left in flight", lost.Load(), stuck.Load())
}
