package stream

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// floodQP is the queue pair of a connection whose peer never stops sending
// valid keepalives: every step completes a full batch of the receives
// posted so far, as a hostile peer at line rate would, and every send.
// After disconnect it is in the error state, as a device's queue pair is
// after rdma_disconnect: what was posted, and what is posted later,
// completes as flushes, after the messages that had arrived (the first
// arrived posted receives), and nothing else.
type floodQP struct {
	noRegions
	mu      sync.Mutex
	recvs   []uint64 // posted receives, oldest first
	sends   []uint64 // posted sends, oldest first
	inError bool
	left    []wr.Completion // in the error state: what is left to poll
	arrived int
	steps   int
	// disconnectedAt is steps when disconnect was called.
	disconnectedAt int
	handler        EventHandler
	stop           chan struct{}
	stopOnce       sync.Once
	// holdOff says the peer has not started its flood yet: it sends
	// nothing.
	holdOff bool
	// stuck says disconnect leaves the queue pair up, as a device that
	// broke its contract would: the flood goes on.
	stuck bool
	// quietAfter, if not 0, is the crossing after which the peer sends
	// no more: it ends a flood that a bug would otherwise let run for
	// ever, so that the test fails on a count instead of hanging.
	quietAfter int
}

func (q *floodQP) Step(flags wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.steps++
	for _, r := range recvs {
		q.recvs = append(q.recvs, r.ID)
	}
	for _, s := range sends {
		q.sends = append(q.sends, s.ID)
	}
	if q.inError {
		q.flushLocked()
		n := copy(out, q.left)
		q.left = q.left[n:]
		return n, nil
	}
	n := 0
	for ; n < len(out) && len(q.sends) > 0; n++ {
		out[n] = wr.Completion{ID: q.sends[0], Opcode: wr.WCRDMAWrite}
		q.sends = q.sends[1:]
	}
	if q.holdOff || q.quietAfter > 0 && q.steps > q.quietAfter {
		return n, nil
	}
	keepalive := uint32(ring.MakeMsg(ring.MsgCtrl, ring.CtrlKeepalive))
	for ; n < len(out) && len(q.recvs) > 0; n++ {
		out[n] = wr.Completion{ID: q.recvs[0], Opcode: wr.WCRecvRDMAWithImm, Imm: keepalive}
		q.recvs = q.recvs[1:]
	}
	return n, nil
}

// flushLocked turns every posted work request into a flush completion.
func (q *floodQP) flushLocked() {
	for _, id := range q.recvs {
		q.left = append(q.left, wr.Completion{ID: id, Opcode: wr.WCRecv, Status: wr.WCWRFlushErr})
	}
	for _, id := range q.sends {
		q.left = append(q.left, wr.Completion{ID: id, Opcode: wr.WCRDMAWrite, Status: wr.WCWRFlushErr})
	}
	q.recvs, q.sends = q.recvs[:0], q.sends[:0]
}

// crossings returns how many steps crossed into the queue pair so far.
func (q *floodQP) crossings() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.steps
}

// wait finds a completion at once: the flood never lets up.
func (q *floodQP) Collected() bool { return false }
func (q *floodQP) CollectAll()     {}

func (q *floodQP) Wait() (bool, error) {
	select {
	case <-q.stop:
		return false, net.ErrClosed
	default:
		return false, nil
	}
}

func (q *floodQP) Kick()          {}
func (q *floodQP) NeedSends(bool) {}

func (q *floodQP) Start(h EventHandler) {
	q.mu.Lock()
	q.handler = h
	q.mu.Unlock()
}

func (q *floodQP) Disconnect() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.disconnectedAt = q.steps
	if q.stuck || q.inError {
		return
	}
	q.inError = true
	keepalive := uint32(ring.MakeMsg(ring.MsgCtrl, ring.CtrlKeepalive))
	k := min(q.arrived, len(q.recvs))
	for _, id := range q.recvs[:k] {
		q.left = append(q.left, wr.Completion{ID: id, Opcode: wr.WCRecvRDMAWithImm, Imm: keepalive})
	}
	q.recvs = q.recvs[k:]
}

func (q *floodQP) Shutdown()            { q.stopOnce.Do(func() { close(q.stop) }) }
func (q *floodQP) Destroy() error       { return nil }
func (q *floodQP) LocalAddr() net.Addr  { return clientAddr }
func (q *floodQP) RemoteAddr() net.Addr { return serverAddr }

// TestControlFloodLetsCloseIn: a peer that keeps the receive path full of
// valid keepalives keeps every step busy, but each step ends after a
// bounded number of crossings, so Close (and any other call) gets the
// connection's lock and the connection closes. Without the bound the first
// step never returns.
func TestControlFloodLetsCloseIn(t *testing.T) {
	set := testSettings(func(s *Settings) { s.Linger = 0 })
	eng := establishedEngine(t, set)
	q := &floodQP{stop: make(chan struct{})}
	for _, r := range eng.PostRecvs(nil) {
		q.recvs = append(q.recvs, r.ID)
	}
	done := make(chan *Conn, 1)
	go func() {
		c := Start(q, eng, set)
		c.Close()
		done <- c
	}()
	select {
	case c := <-done:
		if s := c.Stats().Engine; s.RecvCompletions < MaxStepRounds*CompletionBatch {
			t.Errorf("the flood delivered %d receive completions, fewer than one bounded step's %d: it did not flood",
				s.RecvCompletions, MaxStepRounds*CompletionBatch)
		}
	case <-time.After(time.Minute): // a hang detector only
		q.mu.Lock()
		steps := q.steps
		q.mu.Unlock()
		t.Fatalf("the connection did not close within a minute of a keepalive flood (%d crossings so far)", steps)
	}
}

// TestCloseDuringDisconnectFlood: a peer floods the connection with valid
// keepalives from a queue pair it never takes down, and asks the
// connection manager to disconnect meanwhile. The disconnect's drain takes
// the keepalives that had arrived and ends within what our queue pair can
// flush, since that queue pair goes to the error state first; then Read
// and Write report the peer gone and Close returns, all within a constant
// number of crossings. Without that the drain polls for as long as the
// flood lasts (here it stops after floodCrossings, so that the failure is
// a count, not a hang).
func TestCloseDuringDisconnectFlood(t *testing.T) {
	const floodCrossings = 5000
	set := testSettings(func(s *Settings) { s.Linger = 0 })
	eng := establishedEngine(t, set)
	layout := eng.Layout()
	q := &floodQP{stop: make(chan struct{}), holdOff: true, quietAfter: floodCrossings, arrived: 3 * CompletionBatch}
	for _, r := range eng.PostRecvs(nil) {
		q.recvs = append(q.recvs, r.ID)
	}
	c := Start(q, eng, set)
	// Nothing steps the connection before the disconnect (no call waits
	// on it, and the engine has nothing for the pusher to push), so every
	// crossing counted below is the disconnect's or a call's after it.
	c.mu.Lock()
	busy := c.pushing || c.eng.Blocked()
	c.mu.Unlock()
	if busy {
		t.Fatal("the connection has work before the flood: crossings would not count the disconnect's alone")
	}
	q.mu.Lock()
	h := q.handler
	q.holdOff = false // the flood is on
	before := q.steps
	q.mu.Unlock()

	type result struct {
		crossings         int
		readErr, writeErr error
	}
	done := make(chan result, 1)
	go func() {
		h.TransportDisconnected() // as the connection manager's event
		_, readErr := c.Read(make([]byte, 1))
		_, writeErr := c.Write([]byte{2})
		c.Close()
		done <- result{q.crossings() - before, readErr, writeErr}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute): // a hang detector only
		t.Fatalf("Close did not return within a minute of a disconnect during a flood (%d crossings so far)", q.crossings())
	}
	// What the queue pair can flush, a batch a crossing, and a step's
	// worth for Close.
	bound := (layout.CQDepth+layout.RecvDepth)/CompletionBatch + MaxStepRounds
	if r.crossings > bound {
		t.Errorf("%d crossings between the disconnect and Close's return, more than %d: the drain polled the flood", r.crossings, bound)
	}
	if !errors.Is(r.readErr, ring.ErrPeerGone) || !errors.Is(r.writeErr, ring.ErrPeerGone) {
		t.Errorf("after the disconnect: Read %v, Write %v; want both ring.ErrPeerGone", r.readErr, r.writeErr)
	}
	if s := c.Stats().Engine; s.RecvCompletions < uint64(q.arrived) {
		t.Errorf("the drain took %d receive completions, fewer than the %d messages that arrived before the disconnect",
			s.RecvCompletions, q.arrived)
	}
	t.Logf("%d crossings from the disconnect to Close's return (bound %d)", r.crossings, bound)
}

// TestDisconnectDrainGivesUpOnAStuckQueuePair: a queue pair that goes on
// completing receives after it was moved to the error state (a device
// breaking its contract) does not keep the disconnect's drain going: the
// drain fails the connection after the queue depths' worth of polls.
func TestDisconnectDrainGivesUpOnAStuckQueuePair(t *testing.T) {
	set := testSettings(func(s *Settings) { s.Linger = 0 })
	eng := establishedEngine(t, set)
	layout := eng.Layout()
	q := &floodQP{stop: make(chan struct{}), stuck: true, quietAfter: 5000}
	for _, r := range eng.PostRecvs(nil) {
		q.recvs = append(q.recvs, r.ID)
	}
	c := Start(q, eng, set)
	q.mu.Lock()
	h := q.handler
	q.mu.Unlock()
	type result struct {
		drained int // crossings from the disconnect to the drain's end
		err     error
	}
	done := make(chan result, 1)
	go func() {
		// The connection's lock is held from the disconnect to the end of
		// the drain: every crossing in between is the drain's.
		h.TransportDisconnected()
		q.mu.Lock()
		drained := q.steps - q.disconnectedAt
		q.mu.Unlock()
		_, err := c.Read(make([]byte, 1))
		c.Close()
		done <- result{drained, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute): // a hang detector only
		t.Fatalf("the drain did not give up within a minute (%d crossings so far)", q.crossings())
	}
	if !errors.Is(r.err, ring.ErrPeerGone) || !strings.Contains(r.err.Error(), "error state") {
		t.Errorf("Read after the drain gave up = %v, want ring.ErrPeerGone naming the error state", r.err)
	}
	// The drain's steps up to its limit, each at most MaxStepRounds
	// crossings of polling and as many again after each of its two kinds
	// of posts (credits, regions).
	limit := 1 + (layout.CQDepth+layout.RecvDepth)/(MaxStepRounds*CompletionBatch)
	bound := (limit + 1) * 3 * MaxStepRounds
	if r.drained > bound {
		t.Errorf("the drain made %d crossings, more than %d", r.drained, bound)
	}
	t.Logf("the drain gave up after %d crossings (bound %d)", r.drained, bound)
}

// establishedEngine is an engine established with a peer that exists only
// as its private data, for queue pairs that play the peer themselves.
func establishedEngine(t *testing.T, set Settings) *ring.Engine {
	t.Helper()
	layout := set.Ring.Layout()
	newEngine := func(base uint64) *ring.Engine {
		region := func(off uint64, n int) ring.Region {
			return ring.Region{Buf: make([]byte, n), Addr: base + off, LKey: 1, RKey: 2}
		}
		eng, err := ring.New(set.Ring, region(0, layout.SendRegion), region(1<<30, layout.RecvRegion), region(2<<30, layout.TargetRegion))
		if err != nil {
			t.Fatal(err)
		}
		return eng
	}
	eng, peer := newEngine(1<<40), newEngine(2<<40)
	pe := peer.LocalConnData()
	if err := eng.Establish(pe[:]); err != nil {
		t.Fatal(err)
	}
	return eng
}
