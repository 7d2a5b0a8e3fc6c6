package stream

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// holdQP is a simulated queue pair that can hold back its send
// completions, so that a transfer stays in flight for as long as a test
// wants and the bytes written meanwhile stay corked.
type holdQP struct {
	*simqp.QP
	mu      sync.Mutex
	holding bool
	held    []wr.Completion
}

func (q *holdQP) Step(flags wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	if !q.holding {
		// Held completions come first: sends complete in posting order.
		n = copy(out, q.held)
		q.held = q.held[n:]
	}
	m, err := q.QP.Step(flags, recvs, sends, out[n:], tries)
	if err != nil || !q.holding {
		return n + m, err
	}
	kept := 0
	for _, wc := range out[:m] {
		if wc.ID&ring.RecvIDFlag != 0 {
			out[kept] = wc
			kept++
		} else {
			q.held = append(q.held, wc)
		}
	}
	return kept, nil
}

// silence holds every send completion from now on, as a peer that takes
// our sends and never acknowledges them.
func (q *holdQP) silence() {
	q.mu.Lock()
	q.holding = true
	q.mu.Unlock()
}

// release lets the held completions through and wakes whoever waits.
func (q *holdQP) release() {
	q.mu.Lock()
	q.holding = false
	q.mu.Unlock()
	q.Kick()
}

// holdInFlight makes c treat a transfer in flight as in flight however
// long ago it was posted (see Settings.ReapDelay): a slow machine's Writes must not
// find the held transfer stale and go out at once.
func holdInFlight(c *Conn) {
	c.mu.Lock()
	c.set.ReapDelay = time.Hour
	c.mu.Unlock()
}

// corkedPipe returns a pipe whose first end has written three messages,
// the first posted and held in flight, the other two corked behind it; and
// the 128 bytes written.
func corkedPipe(t *testing.T) (*Conn, *Conn, *holdQP, []byte) {
	t.Helper()
	return corkedPipeConfig(t, nil)
}

// corkedPipeConfig is corkedPipe with testSettings(mod).
func corkedPipeConfig(t *testing.T, mod func(*Settings)) (*Conn, *Conn, *holdQP, []byte) {
	t.Helper()
	var hold *holdQP
	c, s := simPipeWrap(t, mod, func(q *simqp.QP) QueuePair {
		hold = &holdQP{QP: q, holding: true}
		return hold
	})
	holdInFlight(c)
	want := make([]byte, 128)
	for i := range want {
		want[i] = byte(i * 7)
	}
	for _, m := range [][]byte{want[:64], want[64:96], want[96:]} {
		if _, err := c.Write(m); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats().Engine; st.MessagesSent != 1 || st.BytesSent != 64 || st.CoalescedWrites != 1 {
		t.Fatalf("%d transfers of %d bytes, %d coalesced writes; want the later writes corked (1, 64, 1)",
			st.MessagesSent, st.BytesSent, st.CoalescedWrites)
	}
	if !c.EngineConfig().Autocork {
		t.Fatal("autocorking is off by default")
	}
	return c, s, hold, want
}

func closeBoth(t *testing.T, hold *holdQP, conns ...*Conn) {
	t.Helper()
	hold.release()
	for _, c := range conns {
		c.Close()
	}
}

// TestSimCorkWriteThenRead: a writer that writes while earlier data is in
// flight and then only reads gets its bytes to the peer, whose answer it
// waits for, while the completion is still held.
func TestSimCorkWriteThenRead(t *testing.T) {
	c, s, hold, want := corkedPipe(t)
	defer closeBoth(t, hold, c, s)
	errc := make(chan error, 1)
	go func() {
		got := make([]byte, len(want))
		if _, err := io.ReadFull(s, got); err != nil {
			errc <- err
			return
		}
		if !bytes.Equal(got, want) {
			errc <- errors.New("peer read other bytes than written")
			return
		}
		_, err := s.Write([]byte("ok"))
		errc <- err
	}()
	reply := make([]byte, 2)
	if _, err := io.ReadFull(c, reply); err != nil || string(reply) != "ok" {
		t.Fatalf("reply %q, %v", reply, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestSimCorkClose: Close posts the corked bytes at once, so that a Linger
// that runs out before the in-flight transfer completes drops none of them.
func TestSimCorkClose(t *testing.T) {
	c, s, hold, want := corkedPipeConfig(t, func(s *Settings) { s.Linger = 0 })
	defer closeBoth(t, hold, s)
	if err := c.Close(); err != nil {
		t.Fatalf("Close with bytes corked: %v", err)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("peer read %d bytes, %v; want every byte written", len(got), err)
	}
}

// TestSimCorkCloseWrite: CloseWrite sends the corked bytes, then EOF.
func TestSimCorkCloseWrite(t *testing.T) {
	c, s, hold, want := corkedPipe(t)
	defer closeBoth(t, hold, c, s)
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(s)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, %v; want %d and EOF", len(got), err, len(want))
	}
}

// TestSimCorkDeadline: a Read whose deadline has passed posts the corked
// bytes as it gives up.
func TestSimCorkDeadline(t *testing.T) {
	c, s, hold, want := corkedPipe(t)
	defer closeBoth(t, hold, c, s)
	if err := c.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v", err)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %v; bytes equal %v", err, bytes.Equal(got, want))
	}
}

// TestSimCorkIdleWriter: a writer that does nothing after its Writes gets
// its corked bytes out when the transfer in flight completes: the pusher
// polls for that completion.
func TestSimCorkIdleWriter(t *testing.T) {
	c, s, hold, want := corkedPipe(t)
	defer closeBoth(t, hold, c, s)
	hold.release()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %v; bytes equal %v", err, bytes.Equal(got, want))
	}
	if st := c.Stats().Engine; st.MessagesSent != 2 {
		t.Fatalf("%d transfers for three writes, want 2", st.MessagesSent)
	}
}

// TestSimCorkParkedReader: a Read parked in another goroutine before the
// writes cannot uncork them until it wakes; whatever corks behind the
// transfer in flight goes out by the time its completion comes, and the
// parked Read gets its reply.
func TestSimCorkParkedReader(t *testing.T) {
	var hold *holdQP
	c, s := simPipeWrap(t, nil, func(q *simqp.QP) QueuePair {
		hold = &holdQP{QP: q, holding: true}
		return hold
	})
	defer closeBoth(t, hold, c, s)
	holdInFlight(c)
	readc := make(chan error, 1)
	go func() {
		reply := make([]byte, 2)
		_, err := io.ReadFull(c, reply)
		if err == nil && string(reply) != "ok" {
			err = errors.New("the reply was " + string(reply))
		}
		readc <- err
	}()
	conntest.Until(t, "the Read to park", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.waitOwned && !c.pushing || c.queued > 0
	})
	want := bytes.Repeat([]byte("abcdefgh"), 16)
	for _, m := range [][]byte{want[:64], want[64:96], want[96:]} {
		if _, err := c.Write(m); err != nil {
			t.Fatal(err)
		}
	}
	// How many of them cork depends on whether the parked Read wakes in
	// between (a Read about to wait again uncorks); the bytes must arrive
	// either way once the completion comes. The deadline turns bytes
	// stranded for good into a failure rather than a hang.
	hold.release()
	if err := s.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("peer read %v; bytes equal %v", err, bytes.Equal(got, want))
	}
	if _, err := s.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	if err := <-readc; err != nil {
		t.Fatal(err)
	}
}

// TestSimNoDelay: with NoDelay, a Write behind a transfer in flight is
// posted at once, and the engine reports the switch.
func TestSimNoDelay(t *testing.T) {
	var hold *holdQP
	c, s := simPipeWrap(t, func(s *Settings) { s.Ring.Autocork = false }, func(q *simqp.QP) QueuePair {
		hold = &holdQP{QP: q, holding: true}
		return hold
	})
	defer closeBoth(t, hold, c, s)
	for range 2 {
		if _, err := c.Write(make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats().Engine; st.MessagesSent != 2 || st.CoalescedWrites != 0 {
		t.Fatalf("NoDelay: %d transfers, %d coalesced writes; want 2, 0", st.MessagesSent, st.CoalescedWrites)
	}
	if c.EngineConfig().Autocork {
		t.Fatal("autocorking is on with it turned off")
	}
}

// TestCorkWindowFollowsPostCost: on a device in software a Write corks
// behind a transfer for as long as recent posts of ring data took, if that
// is longer than DefaultReapDelay; no post counts for more than maxCorkWindow;
// inline posts, and every post on hardware, are not timed.
func TestCorkWindowFollowsPostCost(t *testing.T) {
	// The average, with exact durations.
	avg := time.Duration(0)
	for range 32 {
		avg = nextPostCost(avg, 200*time.Microsecond)
	}
	if avg < 199*time.Microsecond || avg > 200*time.Microsecond {
		t.Errorf("average of posts of 200µs: %v", avg)
	}
	if got := nextPostCost(avg, time.Second); got != avg+(maxCorkWindow-avg)/4 {
		t.Errorf("a stalled post moved the average to %v, want it counted as %v", got, maxCorkWindow)
	}
	if got := nextPostCost(maxCorkWindow, time.Hour); got != maxCorkWindow {
		t.Errorf("the average passed the cap: %v", got)
	}
	for range 64 {
		avg = nextPostCost(avg, 0)
	}
	if avg > DefaultReapDelay/10 {
		t.Errorf("average after fast posts %v, want it near 0", avg)
	}

	// The wiring: which crossings are timed, and the window they give.
	c := &Conn{set: Settings{ReapDelay: DefaultReapDelay, Ring: ring.Config{Autocork: true}}}
	c.sends = []wr.Send{{NumSGE: 1}}
	if _, timed := c.postStartLocked(); timed {
		t.Error("a post on hardware was timed")
	}
	c.softPosts = true
	c.sends = []wr.Send{{NumSGE: 1, Inline: true}}
	if _, timed := c.postStartLocked(); timed {
		t.Error("an inline post was timed")
	}
	c.notePostLocked(0, false)
	if c.lastPost == 0 || c.postCost != 0 {
		t.Errorf("after an inline post: lastPost %v, postCost %v; want the post noted, no cost", c.lastPost, c.postCost)
	}
	c.sends = []wr.Send{{NumSGE: 1}}
	start, timed := c.postStartLocked()
	if !timed {
		t.Fatal("a post of ring data on a device in software was not timed")
	}
	c.notePostLocked(start-time.Second, timed) // at least a second, counted as the cap
	if c.postCost != maxCorkWindow/4 || c.corkWindow() != maxCorkWindow/4 {
		t.Errorf("after one stalled post: postCost %v, window %v; want %v", c.postCost, c.corkWindow(), maxCorkWindow/4)
	}
	c.postCost = DefaultReapDelay / 2
	if w := c.corkWindow(); w != DefaultReapDelay {
		t.Errorf("window with fast posts %v, want DefaultReapDelay %v", w, DefaultReapDelay)
	}
	// A test that holds completions (holdInFlight) raises ReapDelay.
	c.set.ReapDelay = time.Hour
	if w := c.corkWindow(); w != time.Hour {
		t.Errorf("window with ReapDelay an hour: %v", w)
	}
	// NoDelay: nothing is noted.
	c.set.Ring.Autocork = false
	c.lastPost, c.postCost = 0, 0
	c.notePostLocked(c.postStartLocked())
	if c.lastPost != 0 || c.postCost != 0 {
		t.Errorf("with NoDelay: lastPost %v, postCost %v; want nothing noted", c.lastPost, c.postCost)
	}
}
