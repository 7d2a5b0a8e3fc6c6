package rnet

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// floodQP is the queue pair of a connection whose peer never stops sending
// valid keepalives: every step completes a full batch of the receives
// posted so far, as a hostile peer at line rate would, and every send.
type floodQP struct {
	noRegions
	mu       sync.Mutex
	recvs    []uint64 // posted receives, oldest first
	sends    []uint64 // posted sends, oldest first
	steps    int
	stop     chan struct{}
	stopOnce sync.Once
}

func (q *floodQP) step(flags verbs.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.steps++
	for _, r := range recvs {
		q.recvs = append(q.recvs, r.ID)
	}
	for _, s := range sends {
		q.sends = append(q.sends, s.ID)
	}
	n := 0
	for ; n < len(out) && len(q.sends) > 0; n++ {
		out[n] = wr.Completion{ID: q.sends[0], Opcode: wr.WCRDMAWrite}
		q.sends = q.sends[1:]
	}
	keepalive := uint32(ring.MakeMsg(ring.MsgCtrl, ring.CtrlKeepalive))
	for ; n < len(out) && len(q.recvs) > 0; n++ {
		out[n] = wr.Completion{ID: q.recvs[0], Opcode: wr.WCRecvRDMAWithImm, Imm: keepalive}
		q.recvs = q.recvs[1:]
	}
	return n, nil
}

// wait finds a completion at once: the flood never lets up.
func (q *floodQP) collected() bool { return false }
func (q *floodQP) collectAll()     {}

func (q *floodQP) wait() (bool, error) {
	select {
	case <-q.stop:
		return false, net.ErrClosed
	default:
		return false, nil
	}
}

func (q *floodQP) kick()                {}
func (q *floodQP) start(h eventHandler) {}
func (q *floodQP) disconnect()          {}
func (q *floodQP) shutdown()            { q.stopOnce.Do(func() { close(q.stop) }) }
func (q *floodQP) destroy() error       { return nil }
func (q *floodQP) localAddr() net.Addr  { return netAddr(netip.MustParseAddrPort("10.0.0.1:40000")) }
func (q *floodQP) remoteAddr() net.Addr { return netAddr(netip.MustParseAddrPort("10.0.0.2:7471")) }

// TestControlFloodLetsCloseIn: a peer that keeps the receive path full of
// valid keepalives keeps every step busy, but each step ends after a
// bounded number of crossings, so Close (and any other call) gets the
// connection's lock and the connection closes. Without the bound the first
// step never returns.
func TestControlFloodLetsCloseIn(t *testing.T) {
	set := (&Config{Linger: -1}).settings()
	eng := establishedEngine(t, set)
	q := &floodQP{stop: make(chan struct{})}
	for _, r := range eng.PostRecvs(nil) {
		q.recvs = append(q.recvs, r.ID)
	}
	done := make(chan *Conn, 1)
	go func() {
		c := newConn(q, eng, set)
		c.Close()
		done <- c
	}()
	select {
	case c := <-done:
		if s := c.Stats(); s.RecvCompletions < maxStepRounds*completionBatch {
			t.Errorf("the flood delivered %d receive completions, fewer than one bounded step's %d: it did not flood",
				s.RecvCompletions, maxStepRounds*completionBatch)
		}
	case <-time.After(time.Minute): // a hang detector only
		q.mu.Lock()
		steps := q.steps
		q.mu.Unlock()
		t.Fatalf("the connection did not close within a minute of a keepalive flood (%d crossings so far)", steps)
	}
}

// establishedEngine is an engine established with a peer that exists only
// as its private data, for queue pairs that play the peer themselves.
func establishedEngine(t *testing.T, set settings) *ring.Engine {
	t.Helper()
	layout := set.ring.Layout()
	newEngine := func(base uint64) *ring.Engine {
		region := func(off uint64, n int) ring.Region {
			return ring.Region{Buf: make([]byte, n), Addr: base + off, LKey: 1, RKey: 2}
		}
		eng, err := ring.New(set.ring, region(0, layout.SendRegion), region(1<<30, layout.RecvRegion), region(2<<30, layout.TargetRegion))
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
