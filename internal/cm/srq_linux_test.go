//go:build cgo

package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// These tests establish what a shared receive queue allows on each device,
// for poll groups that share one SRQ among connections which each keep
// their own protection domain: the server's SRQ lives in a protection
// domain of its own, every server QP and its receive buffer in another.

// srqServer is the accepting side: a listener, an SRQ in srqPD, one CQ
// (with its channel) that every QP reports to, and srqMR, a local-only
// region in srqPD for receives that carry an SGE.
type srqServer struct {
	lch      *EventChannel
	listener *ID
	addr     netip.AddrPort
	vctx     *verbs.Context
	srqPD    *verbs.PD
	srq      *verbs.SRQ
	srqMR    *verbs.MR
	cch      *verbs.CompChannel
	cq       *verbs.CQ
}

// srqConn is one connection to an srqServer: the client's endpoint, and
// the server's id, protection domain, receive buffer (REMOTE_WRITE) and QP
// on the shared SRQ.
type srqConn struct {
	client   *endpoint
	clientCh *EventChannel
	serverCh *EventChannel
	id       *ID
	pd       *verbs.PD
	mr       *verbs.MR
	qp       *verbs.QP
}

func newSRQServer(t testing.TB, addr netip.Addr) *srqServer {
	t.Helper()
	s := &srqServer{}
	s.lch, s.listener, s.addr = listen(t, addr)
	var err error
	if s.vctx, err = s.listener.Context(); err != nil {
		t.Fatal(err)
	}
	if s.srqPD, err = s.vctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.srq, err = s.srqPD.NewSRQ(verbs.SRQCaps{MaxWR: 64, MaxSGE: 1}); err != nil {
		t.Fatal(err)
	}
	if s.srqMR, err = s.srqPD.RegisterMR(4096, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if s.cch, err = s.vctx.NewCompChannel(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = s.vctx.NewCQ(256, s.cch); err != nil {
		t.Fatal(err)
	}
	return s
}

// completion waits for the next completion on the shared CQ.
func (s *srqServer) completion(t testing.TB, ctx context.Context) wr.Completion {
	t.Helper()
	return (&endpoint{cq: s.cq, cch: s.cch}).completion(t, ctx)
}

// connect opens a connection from src whose server QP is in a protection
// domain of its own and takes its receives from the shared SRQ.
func (s *srqServer) connect(t testing.TB, ctx context.Context, src netip.Addr) *srqConn {
	t.Helper()
	c := &srqConn{}
	var cid *ID
	c.clientCh, cid = dialID(t, ctx, src, s.addr)
	c.client = newEndpoint(t, cid, verbs.AccessLocalWrite)
	if err := cid.Connect(RsocketConnParam([]byte("srq"))); err != nil {
		t.Fatal(err)
	}
	req, err := s.lch.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if req.Type != EventConnectRequest || req.ID == nil {
		t.Fatalf("listener got %v", &req)
	}
	c.id = req.ID
	if c.serverCh, err = NewEventChannel(); err != nil {
		t.Fatal(err)
	}
	if err := c.id.Migrate(c.serverCh); err != nil {
		t.Fatal(err)
	}
	if c.pd, err = s.vctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if c.mr, err = c.pd.RegisterMR(4096, verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	c.qp, err = c.id.CreateQPOnSRQ(c.pd, s.cq, s.cq, s.srq, verbs.QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 64})
	if err != nil {
		t.Fatal(err)
	}
	if caps := c.qp.Caps(); caps.MaxRecvWR != 0 {
		t.Errorf("QP on an SRQ granted a receive queue of its own: %+v", caps)
	}
	reply := binary.BigEndian.AppendUint64(nil, c.mr.Addr())
	reply = binary.BigEndian.AppendUint32(reply, c.mr.RKey())
	accept := RsocketConnParam(reply)
	accept.ResponderResources, accept.InitiatorDepth = req.Param.ResponderResources, req.Param.InitiatorDepth
	if err := c.id.Accept(accept); err != nil {
		t.Fatal(err)
	}
	if _, err := cid.Await(ctx, EventEstablished); err != nil {
		t.Fatal(err)
	}
	if _, err := c.id.Await(ctx, EventEstablished); err != nil {
		t.Fatal(err)
	}
	return c
}

// close tears the connection down: both QPs, then what they used.
func (c *srqConn) close(t testing.TB) {
	t.Helper()
	c.client.close(t)
	for _, x := range []interface{ Close() error }{c.qp, c.mr, c.pd, c.id, c.serverCh, c.clientCh} {
		if err := x.Close(); err != nil {
			t.Errorf("close %T: %v", x, err)
		}
	}
}

func (s *srqServer) close(t testing.TB) {
	t.Helper()
	for _, x := range []interface{ Close() error }{s.srq, s.srqMR, s.cq, s.cch, s.srqPD, s.listener, s.lch} {
		if err := x.Close(); err != nil {
			t.Errorf("close %T: %v", x, err)
		}
	}
}

// sendWord sends a 4-byte inline SEND, rsocket's message on iWARP.
func (c *srqConn) sendWord(t testing.TB, id uint64, word uint32) {
	t.Helper()
	buf := c.client.mr
	binary.NativeEndian.PutUint32(buf.Bytes()[8*id%4096:], word)
	if _, err := c.client.qp.PostSend([]wr.Send{{ID: id, Op: wr.OpSend, Inline: true, Signaled: true, NumSGE: 1,
		SGE: [2]wr.SGE{{Addr: buf.Addr() + 8*id%4096, Length: 4, LKey: buf.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
}

// writeImm writes msg at offset off of the server's buffer with immediate
// data, rsocket's message on InfiniBand and RoCE.
func (c *srqConn) writeImm(t testing.TB, id uint64, off int, msg []byte, imm uint32) {
	t.Helper()
	buf := c.client.mr
	copy(buf.Bytes()[off:], msg)
	if _, err := c.client.qp.PostSend([]wr.Send{{ID: id, Op: wr.OpWriteImm, Imm: imm, Signaled: true, NumSGE: 1,
		SGE:        [2]wr.SGE{{Addr: buf.Addr() + uint64(off), Length: uint32(len(msg)), LKey: buf.LKey()}},
		RemoteAddr: c.mr.Addr() + uint64(off), RKey: c.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
}

func TestSRQAcrossProtectionDomainsRoCE(t *testing.T) {
	testSRQAcrossProtectionDomains(t, rdmatest.Require(t), false)
}

func TestSRQAcrossProtectionDomainsIWARP(t *testing.T) {
	testSRQAcrossProtectionDomains(t, rdmatest.RequireIWARP(t), true)
}

func testSRQAcrossProtectionDomains(t *testing.T, addrs rdmatest.Pair, iwarp bool) {
	ctx := testCtx(t)
	// A warm-up connection: librdmacm opens its devices (and their fds)
	// once per process and keeps them, so the baseline comes after it.
	connectRecv(t, ctx, addrs.Client, addrs.Server, []byte("warm-up"), iwarp).close(t)
	fds := procstat.OpenFDs(t)
	before := procstat.WaitResources(t, procstat.Resources(t))

	s := newSRQServer(t, addrs.Server)
	info, err := s.vctx.Query()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: max_srq %d, max_srq_wr %d, max_srq_sge %d; SRQ granted %+v",
		info.Name, info.MaxSRQ, info.MaxSRQWR, info.MaxSRQSGE, s.srq.Caps())
	if info.MaxSRQ == 0 || info.MaxSRQWR == 0 {
		t.Fatalf("%s reports no shared receive queues: %+v", info.Name, info)
	}
	if up := procstat.Resources(t); up["srq"] != before["srq"]+1 {
		t.Errorf("with the SRQ made, srq = %d, want %d", up["srq"], before["srq"]+1)
	}

	probeSGELessRecv(t, s)
	destroyed := probeRecvBufferPD(t, ctx, s, addrs.Client, info)

	c0 := s.connect(t, ctx, addrs.Client)
	c1 := s.connect(t, ctx, addrs.Client)
	conns := []*srqConn{c0, c1}
	// A QP number may be handed out again as soon as its QP is destroyed
	// (siw does), which matters to whoever dispatches by number.
	t.Logf("server QPs %#x and %#x, each in its own PD, on one SRQ in a third; the probes' destroyed QPs were %#x",
		c0.qp.Num(), c1.qp.Num(), destroyed)

	checkCompletionsNameTheirQP(t, ctx, s, conns, iwarp)
	checkErrorLeavesSRQReceives(t, ctx, s, c0, c1, iwarp)
	checkSRQLimitEvent(t, ctx, s, c1, iwarp)
	if !iwarp {
		checkKeyStaysInItsPD(t, ctx, c1, c0)
	}

	c0.close(t)
	c1.close(t)
	s.close(t)
	if err := s.srq.Close(); err != nil {
		t.Errorf("second SRQ Close: %v", err)
	}
	if _, err := s.srq.PostRecv([]wr.Recv{{ID: 1}}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("PostRecv after Close: %v, want net.ErrClosed", err)
	}
	after := procstat.WaitResources(t, before)
	if !sameCounts(before, after) || after["srq"] != before["srq"] {
		t.Errorf("rdma resources %v, were %v", after, before)
	}
	if got := procstat.WaitOpenFDs(t, fds); got != fds {
		t.Errorf("open fds %d, were %d", got, fds)
	}
}

// recvWith is one receive of 4 bytes at off in mr, or an SGE-less one for
// a nil mr.
func recvWith(id uint64, mr *verbs.MR, off int) wr.Recv {
	if mr == nil {
		return wr.Recv{ID: id}
	}
	return wr.Recv{ID: id, NumSGE: 1, SGE: wr.SGE{Addr: mr.Addr() + uint64(off), Length: 4, LKey: mr.LKey()}}
}

// probeSGELessRecv: rsocket posts its receives without an SGE on
// InfiniBand and RoCE; see whether an SRQ takes one (on a scratch SRQ, so
// that the shared one holds only what the tests post).
func probeSGELessRecv(t *testing.T, s *srqServer) {
	scratch, err := s.srqPD.NewSRQ(verbs.SRQCaps{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = scratch.PostRecv([]wr.Recv{{ID: 1}})
	t.Logf("SGE-less receive on an SRQ: %v", err)
	if err := scratch.Close(); err != nil {
		t.Fatal(err)
	}
}

// probeRecvBufferPD: a SEND consumes an SRQ receive whose buffer is in the
// SRQ's protection domain, or in the receiving QP's. Each case gets its own
// connection, since a refused one puts the QP in error, and the SRQ holds
// that one receive only. The devices differ: rxe checks the buffer against
// the QP's protection domain, siw against the SRQ's. Elsewhere the outcome
// is only logged.
func probeRecvBufferPD(t *testing.T, ctx context.Context, s *srqServer, client netip.Addr, info verbs.DeviceInfo) (destroyed []uint32) {
	rxe := info.VendorID == verbs.VendorSoftRoCE
	siw := info.Transport == verbs.TransportIWARP && strings.HasPrefix(info.Name, "siw")
	for _, inSRQPD := range []bool{true, false} {
		c := s.connect(t, ctx, client)
		mr, where := c.mr, "the QP's PD"
		if inSRQPD {
			mr, where = s.srqMR, "the SRQ's PD"
		}
		if _, err := s.srq.PostRecv([]wr.Recv{recvWith(100, mr, 0)}); err != nil {
			t.Fatal(err)
		}
		c.sendWord(t, 7, 0xa5a5a5a5)
		cw := c.client.completion(t, ctx)
		sw := s.completion(t, ctx)
		st, _ := c.qp.State()
		t.Logf("SEND into an SRQ receive whose buffer is in %s: receiver %v (opcode %v, %d bytes, QP %#x), sender %v; receiving QP then %v",
			where, sw.Status, sw.Opcode, sw.ByteLen, sw.QPNum, cw.Status, st)
		if sw.ID != 100 || sw.QPNum != c.qp.Num() {
			t.Errorf("receive completion %+v, want receive 100 on QP %#x", sw, c.qp.Num())
		}
		if wantOK := (siw && inSRQPD) || (rxe && !inSRQPD); (rxe || siw) && (sw.Status == wr.WCSuccess) != wantOK {
			t.Errorf("%s: SEND into a receive buffer in %s: %v, want success %v", info.Name, where, sw.Status, wantOK)
		}
		destroyed = append(destroyed, c.qp.Num())
		c.close(t)
	}
	return destroyed
}

// checkCompletionsNameTheirQP: with two QPs in different PDs on one SRQ,
// every receive completion carries the QP its message came in on, and the
// data lands in that connection's buffer.
func checkCompletionsNameTheirQP(t *testing.T, ctx context.Context, s *srqServer, conns []*srqConn, iwarp bool) {
	const rounds = 3
	recvs := make([]wr.Recv, 0, rounds*len(conns))
	for i := range rounds * len(conns) {
		var mr *verbs.MR
		if iwarp {
			mr = s.srqMR
		}
		recvs = append(recvs, recvWith(uint64(200+i), mr, 4*i))
	}
	if n, err := s.srq.PostRecv(recvs); err != nil || n != len(recvs) {
		t.Fatalf("SRQ PostRecv = %d, %v", n, err)
	}
	byQP := map[uint32]int{}
	for i, c := range conns {
		byQP[c.qp.Num()] = i
	}
	for r := range rounds {
		for i, c := range conns {
			tag := uint32(i<<8 | r)
			if iwarp {
				c.sendWord(t, uint64(10+r), 0xc0de0000|tag)
			} else {
				c.writeImm(t, uint64(10+r), 64*r, []byte(fmt.Sprintf("conn %d round %d", i, r)), 0xc0de0000|tag)
			}
			if wc := c.client.completion(t, ctx); wc.Status != wr.WCSuccess {
				t.Fatalf("conn %d send completion %+v", i, wc)
			}
			wc := s.completion(t, ctx)
			if err := verbs.CompletionErr(&wc, wc.QPNum); err != nil {
				t.Fatalf("conn %d receive: %v", i, err)
			}
			got, ok := byQP[wc.QPNum]
			if !ok || got != i {
				t.Fatalf("conn %d's message completed with QP %#x (conn %d, known %v)", i, wc.QPNum, got, ok)
			}
			if iwarp {
				slot := int(wc.ID-200) * 4
				if wc.Opcode != wr.WCRecv || wc.ByteLen != 4 || binary.NativeEndian.Uint32(s.srqMR.Bytes()[slot:]) != 0xc0de0000|tag {
					t.Fatalf("conn %d receive %+v, slot holds %#x", i, wc, binary.NativeEndian.Uint32(s.srqMR.Bytes()[slot:]))
				}
			} else {
				want := fmt.Sprintf("conn %d round %d", i, r)
				if wc.Opcode != wr.WCRecvRDMAWithImm || wc.Imm != 0xc0de0000|tag || !bytes.Equal(c.mr.Bytes()[64*r:64*r+len(want)], []byte(want)) {
					t.Fatalf("conn %d receive %+v, buffer %q", i, wc, c.mr.Bytes()[64*r:64*r+len(want)])
				}
			}
		}
	}
}

// checkErrorLeavesSRQReceives: a QP that goes to the error state (here by
// the server's rdma_disconnect) flushes its own work requests, not the
// receives it shares with other QPs: the other connection still finds every
// one of them.
func checkErrorLeavesSRQReceives(t *testing.T, ctx context.Context, s *srqServer, dead, live *srqConn, iwarp bool) {
	const k = 6
	var mr *verbs.MR
	if iwarp {
		mr = s.srqMR
	}
	recvs := make([]wr.Recv, k)
	for i := range recvs {
		recvs[i] = recvWith(uint64(300+i), mr, 4*i)
	}
	if _, err := s.srq.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	// The server ends the connection; the client answers, as rsocket does.
	if err := dead.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if _, err := dead.client.id.Await(ctx, EventDisconnected); err != nil {
		t.Fatal(err)
	}
	if err := dead.client.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if _, err := dead.id.Await(ctx, EventDisconnected); err != nil {
		t.Fatal(err)
	}
	// siw's ibv_query_qp leaves the state unset: it reads as RESET.
	if st, err := dead.qp.State(); err != nil || (st != verbs.QPErr && !iwarp) {
		t.Fatalf("after rdma_disconnect the QP is %v, %v; want ERR", st, err)
	}
	// A send posted on the QP in error completes flushed: once it is on the
	// CQ, what the error flushed is there too. siw refuses posts on a
	// disconnected QP instead; there the live connection's receives below
	// are the whole proof (a flushed receive would be missing from them).
	_, err := dead.qp.PostSend([]wr.Send{{ID: 399, Op: wr.OpSend, Signaled: true}})
	if iwarp && errors.Is(err, syscall.ENOTCONN) {
		t.Logf("siw: a send posted on the disconnected QP: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		wc := s.completion(t, ctx)
		t.Logf("after the QP %#x went to ERR: completion %+v (%v, %v)", dead.qp.Num(), wc, wc.Status, wc.Opcode)
		if wc.QPNum != dead.qp.Num() {
			t.Fatalf("completion for QP %#x before the marker: %+v", wc.QPNum, wc)
		}
		if wc.ID == 399 {
			if wc.Status != wr.WCWRFlushErr {
				t.Fatalf("marker send on a QP in error: %v", wc.Status)
			}
			break
		}
		t.Errorf("the QP in error flushed SRQ receive %d (%v)", wc.ID, wc.Status)
	}
	for i := range k {
		if iwarp {
			live.sendWord(t, uint64(20+i), 0xbeef0000|uint32(i))
		} else {
			live.writeImm(t, uint64(20+i), 0, []byte("still here"), 0xbeef0000|uint32(i))
		}
		if wc := live.client.completion(t, ctx); wc.Status != wr.WCSuccess {
			t.Fatalf("live conn send completion %+v", wc)
		}
		wc := s.completion(t, ctx)
		if wc.Status != wr.WCSuccess || wc.QPNum != live.qp.Num() || wc.ID != uint64(300+i) {
			t.Fatalf("receive %d for the live QP %#x: %+v (%v)", i, live.qp.Num(), wc, wc.Status)
		}
	}
}

// checkSRQLimitEvent: an armed limit raises IBV_EVENT_SRQ_LIMIT_REACHED once
// fewer receives than it are left, and disarms.
func checkSRQLimitEvent(t *testing.T, ctx context.Context, s *srqServer, c *srqConn, iwarp bool) {
	const posted, limit = 8, 4
	var mr *verbs.MR
	if iwarp {
		mr = s.srqMR
	}
	recvs := make([]wr.Recv, posted)
	for i := range recvs {
		recvs[i] = recvWith(uint64(400+i), mr, 4*i)
	}
	if _, err := s.srq.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	if err := s.srq.SetLimit(limit); err != nil {
		t.Fatal(err)
	}
	// siw's provider has no ibv_query_srq (EOPNOTSUPP): the limit cannot
	// be read back there.
	queryable := true
	if got, err := s.srq.Limit(); iwarp && errors.Is(err, syscall.EOPNOTSUPP) {
		t.Logf("siw: %v", err)
		queryable = false
	} else if err != nil || got != limit {
		t.Fatalf("SRQ limit %d, %v; want %d", got, err, limit)
	}
	// Consume receives until fewer than limit are left.
	for i := range posted - limit + 1 {
		if iwarp {
			c.sendWord(t, uint64(30+i), uint32(i))
		} else {
			c.writeImm(t, uint64(30+i), 0, []byte("drain"), uint32(i))
		}
		if wc := c.client.completion(t, ctx); wc.Status != wr.WCSuccess {
			t.Fatalf("send completion %+v", wc)
		}
		if wc := s.completion(t, ctx); wc.Status != wr.WCSuccess || wc.ID != uint64(400+i) {
			t.Fatalf("receive %+v (%v)", wc, wc.Status)
		}
	}
	for {
		ev, err := s.vctx.NextAsyncEvent(testTimeout)
		if err != nil {
			t.Fatalf("waiting for IBV_EVENT_SRQ_LIMIT_REACHED: %v", err)
		}
		t.Logf("async event %v (QP %#x, port %d, this SRQ: %v)", ev.Type, ev.QPNum, ev.Port, ev.IsFor(s.srq))
		if ev.Type == verbs.EventSRQLimitReached && ev.IsFor(s.srq) {
			break
		}
	}
	if got, err := s.srq.Limit(); queryable && (err != nil || got != 0) {
		t.Errorf("SRQ limit after its event %d, %v; want 0 (disarmed)", got, err)
	}
	// The receives left are still there for the live QP.
	for i := posted - limit + 1; i < posted; i++ {
		if iwarp {
			c.sendWord(t, uint64(30+i), uint32(i))
		} else {
			c.writeImm(t, uint64(30+i), 0, []byte("drain"), uint32(i))
		}
		if wc := c.client.completion(t, ctx); wc.Status != wr.WCSuccess {
			t.Fatalf("send completion %+v", wc)
		}
		if wc := s.completion(t, ctx); wc.Status != wr.WCSuccess || wc.ID != uint64(400+i) {
			t.Fatalf("receive %+v (%v)", wc, wc.Status)
		}
	}
}
