//go:build linux && cgo

package faults

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
	"github.com/rnet-dev/rnet/rnet"
)

// floodData posts n one-byte DATA messages (RDMA WRITE WITH IMMEDIATE into
// the rnet side's first half, one byte after the other) at once, credits
// or not.
func (p *fakePeer) floodData(n int) {
	p.t.Helper()
	copy(p.sbuf.Bytes(), pool[:n])
	sends := make([]wr.Send, n)
	for i := range sends {
		sends[i] = wr.Send{ID: p.next, Op: wr.OpWriteImm, Imm: uint32(ring.MakeMsg(ring.MsgData, 1)), Signaled: true,
			RemoteAddr: p.peer.DataBuf.Addr + uint64(i), RKey: p.peer.DataBuf.Key, NumSGE: 1}
		sends[i].SGE[0] = wr.SGE{Addr: p.sbuf.Addr() + uint64(i), Length: 1, LKey: p.sbuf.LKey()}
		p.next++
	}
	if _, err := p.qp.PostSend(sends); err != nil {
		p.t.Fatalf("post %d DATA messages: %v", n, err)
	}
}

// disconnectAndCount disconnects, which moves our queue pair to the error
// state, and so flushes the sends the rnet side will never acknowledge:
// once it cut the connection off, our queue pair would retry them without
// end (rxe takes retry count 7 as unlimited). It returns how many of the
// n sends succeeded before that.
func (p *fakePeer) disconnectAndCount(n int) int {
	p.t.Helper()
	if err := p.id.Disconnect(); err != nil {
		p.t.Fatalf("disconnect: %v", err)
	}
	ok := 0
	for done := 0; done < n; {
		wc := p.completion()
		if wc.ID&(1<<63) != 0 {
			p.recvs++ // the rnet side's credit update, or a flushed receive
			continue
		}
		done++
		if wc.Status == wr.WCSuccess {
			ok++
		}
	}
	return ok
}

// TestHostilePeerOnSharedReceiveQueue: on rxe the connections of a poll
// group take their receives from one shared receive queue. A fake peer
// that sends far more DATA messages than the credits it was granted, and
// so takes receives of the queue that were posted for other connections,
// gets its connection cut off with a credit overrun, while the other
// connections of the group, streaming at the same time, deliver every
// byte; nothing leaks.
func TestHostilePeerOnSharedReceiveQueue(t *testing.T) {
	pair := rdmatest.Require(t)
	ln := listen(t, pair, &rnet.Config{Linger: time.Hour})
	target := ln.Addr().(*rnet.Addr).AddrPort
	// A connection kept open while the baseline is taken: the devices'
	// contexts and the poll groups stay as they are now.
	good1, good2 := connect(t, pair, ln, nil)
	defer good1.Close()
	defer good2.Close()
	before := takeSnapshot(t)

	const honest = 4
	total := int64(16 << 20)
	if testing.Short() {
		total = 4 << 20
	}
	type result struct {
		sent, got     stream
		sendErr, rErr error
	}
	results := make([]result, honest)
	var wg sync.WaitGroup
	var conns []*rnet.Conn
	for i := range honest {
		a, b := connect(t, pair, ln, nil)
		conns = append(conns, a, b)
		wg.Add(2)
		go func() {
			defer wg.Done()
			results[i].sent, results[i].sendErr = send(a, total, 64<<10, uint64(i))
			a.CloseWrite()
		}()
		go func() {
			defer wg.Done()
			results[i].got, results[i].rErr = recv(b, uint64(i))
		}()
	}

	p := dialFake(t, pair, target)
	c, err := ln.AcceptRDMA()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The listener's end posted receives for its credits and
	// RecvHeadroom more, and may borrow RecvHeadroom more; 40 messages go
	// beyond that.
	n := int(p.peer.Credits) + 2*ring.RecvHeadroom + 40
	p.floodData(n)
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 64<<10)
	for err == nil {
		_, err = c.Read(buf)
	}
	if !errors.Is(err, rnet.ErrProtocol) || !errors.Is(err, ring.ErrCreditOverrun) {
		t.Errorf("after a flood of %d DATA messages: Read = %v, want rnet.ErrProtocol and %v", n, err, ring.ErrCreditOverrun)
	}
	took := p.disconnectAndCount(n)
	t.Logf("%d of %d DATA messages took receives: %v", took, n, err)

	wg.Wait()
	for i, r := range results {
		if r.sendErr != nil || r.rErr != nil || r.got != r.sent || r.sent.bytes != total {
			t.Errorf("connection %d: sent %+v (%v), received %+v (%v)", i, r.sent, r.sendErr, r.got, r.rErr)
		}
	}
	for _, cn := range conns {
		cn.Close()
	}
	c.Close()
	p.close()
	roundTrip(t, good1, good2, "still fine after the hostile peer")
	checkNoLeaks(t, before, "a hostile peer on a shared receive queue")
}
