//go:build linux && cgo

package faults

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
	"github.com/rnet-dev/rnet/rnet"
)

// flood sends empty DATA messages (valid, consumed as they arrive) as fast
// as the rnet side's credits let it, taking its credit updates, until ctx
// ends. Each credit update is signalled on granted. It returns why it
// stopped early, or nil when ctx ended it.
func (p *fakePeer) flood(ctx context.Context, granted chan<- struct{}) error {
	const window = 64 // sends in flight, within the fake's send queue
	comp := p.peer.Credits
	var sent uint16
	inFlight := 0
	sends := make([]wr.Send, 0, window)
	wcs := make([]wr.Completion, 32)
	empty := uint32(ring.MakeMsg(ring.MsgData, 0))
	for {
		sends = sends[:0]
		for inFlight+len(sends) < window && int16(comp-sent) > 0 {
			sends = append(sends, wr.Send{ID: p.next, Op: wr.OpWriteImm, Imm: empty, Signaled: true,
				RemoteAddr: p.peer.DataBuf.Addr, RKey: p.peer.DataBuf.Key})
			p.next++
			sent++
		}
		if len(sends) > 0 {
			n, err := p.qp.PostSend(sends)
			inFlight += n
			if err != nil {
				return fmt.Errorf("post: %w", err)
			}
		}
		n, err := p.cq.Poll(wcs)
		if err == nil && n == 0 {
			if err = p.cq.ReqNotify(false); err == nil {
				if n, err = p.cq.Poll(wcs); err == nil && n == 0 {
					if _, werr := p.cc.Wait(ctx); werr != nil {
						if ctx.Err() != nil {
							return nil
						}
						return fmt.Errorf("waiting for a completion: %w", werr)
					}
				}
			}
		}
		if err != nil {
			return err
		}
		for _, wc := range wcs[:n] {
			if wc.ID&(1<<63) == 0 {
				inFlight-- // a send; once the rnet side is gone they fail or never complete
				continue
			}
			if wc.Status != wr.WCSuccess {
				continue // flushed: our own queue pair went down
			}
			if m := ring.Msg(wc.Imm); m.Op() == ring.MsgSGL {
				comp = uint16(m.Data())
				select {
				case granted <- struct{}{}:
				default:
				}
			}
			if _, err := p.qp.PostRecv([]wr.Recv{{ID: wc.ID}}); err != nil {
				return fmt.Errorf("repost: %w", err)
			}
		}
	}
}

// TestRXEDisconnectFlood: a peer floods a connection with valid messages
// and sends its disconnect request from a queue pair it keeps up, flooding
// on. The rnet side moves its queue pair to the error state as it takes
// the disconnect, so its drain ends on flushes: Read reports the peer
// gone, Write fails and Close returns, while the flood goes on, and
// nothing is left behind.
func TestRXEDisconnectFlood(t *testing.T) {
	pair := rdmatest.Require(t)
	// Linger of an hour: a Close that waited for the flooding peer would
	// hang, which closeWithin reports.
	cfg := &rnet.Config{Linger: time.Hour}
	ln := listen(t, pair, cfg)
	// A connection first, so that both devices are open before the
	// snapshot: librdmacm keeps a device open once it has used it.
	c1, c2 := connect(t, pair, ln, cfg)
	roundTrip(t, c1, c2, "before the flood")
	c1.Close()
	c2.Close()
	before := takeSnapshot(t)
	p := dialFake(t, pair, ln.Addr().(*rnet.Addr).AddrPort)
	c, err := ln.AcceptRDMA()
	if err != nil {
		p.close()
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := c.Read(buf); err != nil {
				readErr <- err
				return
			}
		}
	}()

	ctx, stop := context.WithCancel(context.Background())
	granted := make(chan struct{}, 1)
	floodErr := make(chan error, 1)
	go func() { floodErr <- p.flood(ctx, granted) }()
	// The flood is on once the rnet side, reading, has granted more
	// credits a few times.
	for i := range 3 {
		select {
		case <-granted:
		case err := <-floodErr:
			t.Fatalf("the flood stopped after %d credit updates: %v", i, err)
		case <-time.After(wait): // a hang detector only
			t.Fatalf("%d credit updates within %v: the flood does not flow", i, wait)
		}
	}
	polls := c.Stats().CQPolls
	if err := p.id.DisconnectKeepingQP(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-readErr:
		if !errors.Is(err, rnet.ErrPeerGone) {
			t.Errorf("Read after the peer's disconnect request = %v, want rnet.ErrPeerGone", err)
		}
	case <-time.After(wait): // a hang detector only
		t.Fatalf("Read did not return within %v of the disconnect during a flood", wait)
	}
	took := time.Since(start)
	if _, err := c.Write([]byte("x")); err == nil {
		t.Error("Write after the peer's disconnect succeeded")
	}
	closeWithin(t, c, wait)
	t.Logf("the disconnect ended Read after %v and %d polls of the CQ (%d before it)",
		took.Round(time.Microsecond), c.Stats().CQPolls-polls, polls)
	stop()
	if err := <-floodErr; err != nil {
		t.Logf("the flood ended with %v", err)
	}
	p.close()
	checkNoLeaks(t, before, "a disconnect during a flood")
}
