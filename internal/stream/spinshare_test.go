package stream

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// spinSharedQP is a simulated queue pair on a CQ that other connections
// share (a SpinSharer): turn is the one spinner's turn of them all, which
// the test may hold for another connection. waiting receives a token each
// time the connection's wait parks, spinning when a spinning step polls;
// asked counts the spinner's questions whether it woke another waiter.
type spinSharedQP struct {
	*simqp.QP
	turn     *atomic.Bool
	waiting  chan struct{}
	spinning chan struct{}
	asked    atomic.Int64
	// wokeOthers is what the next SpinWokeOthers reports.
	wokeOthers atomic.Bool
}

func (q *spinSharedQP) TrySpin() bool { return q.turn.CompareAndSwap(false, true) }
func (q *spinSharedQP) EndSpin()      { q.turn.Store(false) }
func (q *spinSharedQP) SpinWokeOthers() bool {
	q.asked.Add(1)
	return q.wokeOthers.Swap(false)
}

func (q *spinSharedQP) Step(flags wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	if tries > 1 {
		select {
		case q.spinning <- struct{}{}:
		default:
		}
	}
	return q.QP.Step(flags, recvs, sends, out, tries)
}

func (q *spinSharedQP) Wait() (bool, error) {
	select {
	case q.waiting <- struct{}{}:
	default:
	}
	return q.QP.Wait()
}

// spinSharedPipe is simPipe whose first Conn is on a shared CQ, with spins
// of window (no adaptive limit).
func spinSharedPipe(t *testing.T, window time.Duration) (*Conn, *Conn, *spinSharedQP) {
	t.Helper()
	return spinSharedPipeWith(t, func(s *Settings) { s.BusyPoll, s.BusyPollLimit, s.BusyPollLimitMax = window, 0, 0 })
}

// spinSharedPipeWith is spinSharedPipe with the settings mod gives.
func spinSharedPipeWith(t *testing.T, mod func(*Settings)) (*Conn, *Conn, *spinSharedQP) {
	t.Helper()
	var q *spinSharedQP
	c, s := simPipeWrap(t, mod,
		func(qp *simqp.QP) QueuePair {
			q = &spinSharedQP{QP: qp, turn: new(atomic.Bool), waiting: make(chan struct{}, 1), spinning: make(chan struct{}, 1)}
			return q
		})
	t.Cleanup(func() {
		c.Close()
		s.Close()
	})
	return c, s, q
}

// TestReadParksWhileAnotherSpins: while another connection's caller spins
// on the shared CQ, a Read that finds nothing parks at once instead of
// spinning too, and the peer's data still wakes it.
func TestReadParksWhileAnotherSpins(t *testing.T) {
	// The window is long enough that a Read which spins is seen to: it
	// reaches the wait only after it, and Stats counts the spin.
	c, s, q := spinSharedPipe(t, 200*time.Millisecond)
	q.turn.Store(true) // another connection spins
	got := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		got <- err
	}()
	<-q.waiting
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Spins != 0 || st.SpinsDeferred != 1 {
		t.Fatalf("a Read while another connection spins: %d spins, %d deferred; want 0 and 1", st.Spins, st.SpinsDeferred)
	}
	if !q.turn.Load() {
		t.Fatal("the Read released a spinner's turn it never had")
	}
}

// TestSpinHoldsTheSharedTurn: a Read that spins holds the one spinner's
// turn for as long as it spins, asks after its rounds whether it woke
// another connection's waiter, and gives the turn back however the spin
// ends: with data, and with Close.
func TestSpinHoldsTheSharedTurn(t *testing.T) {
	c, s, q := spinSharedPipe(t, time.Hour)
	got := make(chan error, 1)
	read := func() {
		select {
		case <-q.spinning: // a token of an earlier spin
		default:
		}
		go func() {
			_, err := c.Read(make([]byte, 1))
			got <- err
		}()
		// The second spinning step comes after the first found nothing
		// and asked whether it woke another waiter.
		<-q.spinning
		<-q.spinning
		if q.TrySpin() {
			t.Fatal("a Read spins, and another connection could spin too")
		}
	}
	read()
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if q.turn.Load() {
		t.Fatal("the Read got its data and kept the spinner's turn")
	}
	if st := c.Stats(); st.Spins != 1 || st.SpinsDeferred != 0 {
		t.Fatalf("a Read alone on the CQ: %d spins, %d deferred; want 1 and 0", st.Spins, st.SpinsDeferred)
	}
	if q.asked.Load() == 0 {
		t.Fatal("the spinner never asked whether its polls woke another connection's waiter")
	}

	read()
	c.Close()
	if err := <-got; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a spinning Read closed under it: %v, want net.ErrClosed", err)
	}
	if q.turn.Load() {
		t.Fatal("the Read ended by Close kept the spinner's turn")
	}
}

// TestSpinEndsWhenOthersHaveWork: a spin whose polls woke another
// connection's waiter on the shared CQ ends there and parks, leaving the
// CPU to that connection's work; its own data still wakes it.
func TestSpinEndsWhenOthersHaveWork(t *testing.T) {
	// As in TestReadParksWhileAnotherSpins, a spin that went on would
	// reach the wait only after this window, and not count as left.
	c, s, q := spinSharedPipe(t, 200*time.Millisecond)
	q.wokeOthers.Store(true)
	got := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		got <- err
	}()
	<-q.waiting
	if q.turn.Load() {
		t.Fatal("the Read parked and kept the spinner's turn")
	}
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Spins != 1 || st.SpinsLeft != 1 {
		t.Fatalf("a spin that woke another connection: %d spins, %d left; want 1 and 1", st.Spins, st.SpinsLeft)
	}
}

// TestDeferredSpinsTeachNothing: a wait whose spin was left to another
// connection's caller parks at once, and one whose spin woke another
// connection's waiter stops spinning early; either lasts longer than a
// spun wait would. Such waits must not feed the spin policy, which would
// take them for replies too slow to spin for (or for a dear park) and turn
// this connection's spinning off once the CPU is its own again.
func TestDeferredSpinsTeachNothing(t *testing.T) {
	for _, cutShort := range []bool{false, true} {
		name := map[bool]string{false: "deferred", true: "cut short"}[cutShort]
		t.Run(name, func(t *testing.T) {
			c, s, q := spinSharedPipeWith(t, func(set *Settings) {
				set.BusyPoll, set.BusyPollLimit, set.BusyPollLimitMax = 50*time.Microsecond, time.Millisecond, 2*time.Millisecond
			})
			if !cutShort {
				q.turn.Store(true) // another connection spins throughout
			}
			one := make([]byte, 1)
			const waits = 2 * streamSpinWarmup
			for i := 0; i < waits; i++ {
				if i%2 == 0 {
					// A request first: the next Read waits for its reply.
					if _, err := c.Write([]byte("q")); err != nil {
						t.Fatal(err)
					}
					if _, err := io.ReadFull(s, one); err != nil {
						t.Fatal(err)
					}
				}
				select {
				case <-q.waiting: // a token of an earlier park
				default:
				}
				q.wokeOthers.Store(cutShort) // the spin's first round wakes another connection
				got := make(chan error, 1)
				go func() {
					_, err := c.Read(make([]byte, 1))
					got <- err
				}()
				<-q.waiting
				if _, err := s.Write([]byte("a")); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatal(err)
				}
			}
			st := c.Stats()
			if n := map[bool]uint64{false: st.SpinsDeferred, true: st.SpinsLeft}[cutShort]; n < waits {
				t.Fatalf("%d of %d waits' spins %s (stats %+v)", n, waits, name, st)
			}
			// The Reads have returned: their writes to the policy happened before.
			if w := &c.readWait; w.avg != 0 || w.nParked != 0 || c.streamSpin.spins != 0 {
				t.Fatalf("waits whose spin was %s fed the spin policy: reply average %v, %d parks measured, %d stream spins observed",
					name, w.avg, w.nParked, c.streamSpin.spins)
			}
		})
	}
}
