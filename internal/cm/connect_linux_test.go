//go:build cgo

package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// pair is a connected client and server, each with its own event channel.
type pair struct {
	lch, cch, sch *EventChannel
	listener      *ID
	client        *endpoint
	server        *endpoint
	serverAddr    netip.AddrPort
	fromClient    []byte // private data the server saw in CONNECT_REQUEST
	fromServer    []byte // private data the client saw in ESTABLISHED
}

// connect sets up a connection from src to a listener on dst the way rnet's
// driver will: the accepted id moves onto its own channel, both sides make
// their QP on the id's device, the server's receive buffer (REMOTE_WRITE)
// is advertised in the accept's private data.
func connect(t testing.TB, ctx context.Context, src, dst netip.Addr, hello []byte) *pair {
	return connectRecv(t, ctx, src, dst, hello, false)
}

// connectRecv is connect; with recvSGE, the server's first receive has a
// 4-byte SGE at offset 4096 of its buffer (iWARP rejects SGE-less
// receives, and rsocket's iWARP mode receives its message word there).
func connectRecv(t testing.TB, ctx context.Context, src, dst netip.Addr, hello []byte, recvSGE bool) *pair {
	t.Helper()
	p := &pair{}
	p.lch, p.listener, p.serverAddr = listen(t, dst)

	var cid *ID
	p.cch, cid = dialID(t, ctx, src, p.serverAddr)
	p.client = newEndpoint(t, cid, verbs.AccessLocalWrite)
	if err := cid.Connect(RsocketConnParam(hello)); err != nil {
		t.Fatal(err)
	}

	req, err := p.lch.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if req.Type != EventConnectRequest || req.Listener != p.listener || req.ID == nil || req.ID == p.listener {
		t.Fatalf("listener got %v (listener %p, want %p)", &req, req.Listener, p.listener)
	}
	p.fromClient = req.Param.PrivateData
	var err2 error
	if p.sch, err2 = NewEventChannel(); err2 != nil {
		t.Fatal(err2)
	}
	if err := req.ID.Migrate(p.sch); err != nil {
		t.Fatal(err)
	}
	p.server = newEndpoint(t, req.ID, verbs.AccessRemoteWrite)
	// One receive without SGE: a write-with-immediate consumes it and
	// delivers only the immediate, as in rsocket.
	recv := wr.Recv{ID: 1}
	if recvSGE {
		recv.NumSGE, recv.SGE = 1, wr.SGE{Addr: p.server.mr.Addr() + 4096, Length: 4, LKey: p.server.mr.LKey()}
	}
	if _, err := p.server.qp.PostRecv([]wr.Recv{recv}); err != nil {
		t.Fatal(err)
	}
	reply := binary.BigEndian.AppendUint64(nil, p.server.mr.Addr())
	reply = binary.BigEndian.AppendUint32(reply, p.server.mr.RKey())
	reply = append(reply, "rnet-server"...)
	accept := RsocketConnParam(reply)
	accept.ResponderResources, accept.InitiatorDepth = req.Param.ResponderResources, req.Param.InitiatorDepth
	if err := req.ID.Accept(accept); err != nil {
		t.Fatal(err)
	}
	est, err := cid.Await(ctx, EventEstablished)
	if err != nil {
		t.Fatal(err)
	}
	p.fromServer = est.Param.PrivateData
	if _, err := req.ID.Await(ctx, EventEstablished); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pair) close(t testing.TB) {
	t.Helper()
	p.client.close(t)
	p.server.close(t)
	if err := p.listener.Close(); err != nil {
		t.Error(err)
	}
	for _, ch := range []*EventChannel{p.lch, p.cch, p.sch} {
		if err := ch.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestConnectWriteImmDisconnect(t *testing.T) {
	addrs := rdmatest.Require(t)
	ctx := testCtx(t)
	hello := []byte("rnet-client-hello")
	p := connect(t, ctx, addrs.Client, addrs.Server, hello)
	defer p.close(t)

	// Private data both ways. IB/RoCE pad it to the message's fixed size.
	if !bytes.HasPrefix(p.fromClient, hello) {
		t.Fatalf("server got private data %q, want prefix %q", p.fromClient, hello)
	}
	if len(p.fromServer) < 23 || string(p.fromServer[12:23]) != "rnet-server" {
		t.Fatalf("client got private data %q", p.fromServer)
	}
	raddr := binary.BigEndian.Uint64(p.fromServer[0:8])
	rkey := binary.BigEndian.Uint32(p.fromServer[8:12])

	// Addresses read back from the ids.
	if got := p.client.id.RemoteAddr(); got != p.serverAddr {
		t.Errorf("client RemoteAddr %v, want %v", got, p.serverAddr)
	}
	if got := p.client.id.LocalAddr().Addr(); got != addrs.Client {
		t.Errorf("client LocalAddr %v, want %v", got, addrs.Client)
	}
	if got := p.server.id.RemoteAddr().Addr(); got != addrs.Client {
		t.Errorf("server RemoteAddr %v, want %v", got, addrs.Client)
	}
	if got := p.server.id.LocalAddr(); got != p.serverAddr {
		t.Errorf("server LocalAddr %v, want %v", got, p.serverAddr)
	}
	caps := p.client.qp.Caps()
	t.Logf("client QP %#x granted %+v; server QP %#x; devices %s / %s",
		p.client.qp.Num(), caps, p.server.qp.Num(), p.client.pd.Context().Name(), p.server.pd.Context().Name())
	if caps.MaxInlineData < 64 || caps.MaxSendSGE < 2 {
		t.Errorf("granted caps %+v below what was asked", caps)
	}
	if st, err := p.client.qp.State(); err != nil || st != verbs.QPRTS {
		t.Errorf("client QP state %v, %v; want RTS", st, err)
	}
	if p.server.mr.Access()&verbs.AccessRemoteRead != 0 {
		t.Error("receive buffer grants REMOTE_READ")
	}

	// One chain, one crossing: a plain RDMA WRITE from two SGEs, then an
	// inline RDMA WRITE WITH IMMEDIATE of the tail.
	buf := p.client.mr.Bytes()
	msg := []byte("hello over rdma, written from two SGEs and one inline tail!")
	copy(buf, msg[:20])
	copy(buf[1000:], msg[20:40])
	copy(buf[2000:], msg[40:])
	base, lkey := p.client.mr.Addr(), p.client.mr.LKey()
	wrs := []wr.Send{
		{ID: 10, Op: wr.OpWrite, Signaled: true, NumSGE: 2,
			SGE:        [2]wr.SGE{{Addr: base, Length: 20, LKey: lkey}, {Addr: base + 1000, Length: 20, LKey: lkey}},
			RemoteAddr: raddr, RKey: rkey},
		{ID: 11, Op: wr.OpWriteImm, Imm: 0xdeadbeef, Inline: true, Signaled: true, NumSGE: 1,
			SGE:        [2]wr.SGE{{Addr: base + 2000, Length: uint32(len(msg) - 40), LKey: lkey}},
			RemoteAddr: raddr + 40, RKey: rkey},
	}
	before := verbs.CgoCalls()
	if n, err := p.client.qp.PostSend(wrs); err != nil || n != 2 {
		t.Fatalf("PostSend = %d, %v", n, err)
	}
	if d := verbs.CgoCalls() - before; d != 1 {
		t.Errorf("PostSend of a 2-WR chain made %d cgo calls, want 1", d)
	}
	for _, want := range []uint64{10, 11} {
		wc := p.client.completion(t, ctx)
		if err := verbs.CompletionErr(&wc, p.client.qp.Num()); err != nil || wc.ID != want {
			t.Fatalf("send completion %+v: %v (want id %d)", wc, err, want)
		}
	}
	wc := p.server.completion(t, ctx)
	if err := verbs.CompletionErr(&wc, p.server.qp.Num()); err != nil {
		t.Fatal(err)
	}
	if wc.Opcode != wr.WCRecvRDMAWithImm || wc.Imm != 0xdeadbeef || wc.ID != 1 {
		t.Fatalf("receive completion %+v (opcode %v), want RECV_RDMA_WITH_IMM imm 0xdeadbeef", wc, wc.Opcode)
	}
	got := p.server.mr.Bytes()
	if !bytes.Equal(got[:len(msg)], msg) || got[len(msg)] != 0 {
		t.Fatalf("server buffer %q, want exactly %q", got[:len(msg)+1], msg)
	}
	// The immediate-carrying write reports its own length.
	if wc.ByteLen != uint32(len(msg)-40) {
		t.Errorf("ByteLen %d, want %d", wc.ByteLen, len(msg)-40)
	}

	checkHotPathCost(t, ctx, p, raddr, rkey)
	checkStepArms(t, ctx, p, raddr, rkey)
	checkWaitReadyStepTakesEvent(t, ctx, p, raddr, rkey)
	checkStepTakeEventArmRearms(t, ctx, p, raddr, rkey)
	checkStepTries(t, ctx, p, raddr, rkey)

	// Disconnect from the client: both sides see DISCONNECTED.
	p.disconnect(t, ctx)
}

// checkHotPathCost: posting and polling cross into C once per call and do
// not allocate.
func checkHotPathCost(t *testing.T, ctx context.Context, p *pair, raddr uint64, rkey uint32) {
	sends := []wr.Send{{ID: 20, Op: wr.OpWrite, Signaled: true, RemoteAddr: raddr, RKey: rkey}}
	recvs := []wr.Recv{{ID: 21}}
	var wc [8]wr.Completion
	const runs = 10 // the queues hold 16: AllocsPerRun does runs+1 posts
	for name, f := range map[string]func(){
		"PostSend": func() {
			if _, err := p.client.qp.PostSend(sends); err != nil {
				t.Fatal(err)
			}
		},
		"PostRecv": func() {
			if _, err := p.server.qp.PostRecv(recvs); err != nil {
				t.Fatal(err)
			}
		},
		"Poll": func() {
			if _, err := p.server.cq.Poll(wc[:]); err != nil {
				t.Fatal(err)
			}
		},
	} {
		before := verbs.CgoCalls()
		allocs := testing.AllocsPerRun(runs, f)
		if calls := verbs.CgoCalls() - before; calls != runs+1 {
			t.Errorf("%s: %d cgo calls in %d runs, want one each", name, calls, runs+1)
		}
		if allocs != 0 && !raceEnabled {
			t.Errorf("%s allocates %v times per call", name, allocs)
		}
	}
	// Reap the zero-length writes.
	for range runs + 1 {
		if wc := p.client.completion(t, ctx); wc.Status != wr.WCSuccess || wc.ID != 20 {
			t.Fatalf("zero-length write completion %+v", wc)
		}
	}
}

// checkStepArms: Step(StepArm) arms the CQ in its one crossing, so
// the write it posts produces an event on the completion channel whether
// or not the same call already polled its completion. An arm is spent by
// one event, so the test first spends any arm left over: without the arm
// in Step(StepArm) the Wait below would not return.
func checkStepArms(t *testing.T, ctx context.Context, p *pair, raddr uint64, rkey uint32) {
	c := p.client
	write := func(id uint64) []wr.Send {
		return []wr.Send{{ID: id, Op: wr.OpWrite, Signaled: true, RemoteAddr: raddr, RKey: rkey}}
	}
	var wc [4]wr.Completion
	reap := func(id uint64, have int) {
		for have == 0 {
			n, err := c.cq.Poll(wc[:])
			if err != nil {
				t.Fatal(err)
			}
			have = n
		}
		if have != 1 || wc[0].ID != id || wc[0].Status != wr.WCSuccess {
			t.Fatalf("completions %+v (%d), want write %d's", wc[:have], have, id)
		}
	}
	// Spend any arm: arm now, post, take the event and the completion.
	if err := c.cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.qp.PostSend(write(40)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cch.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	reap(40, 0)

	before := verbs.CgoCalls()
	n, err := c.qp.Step(c.cq, verbs.StepArm, nil, write(41), wc[:], 1)
	if err != nil {
		t.Fatal(err)
	}
	if calls := verbs.CgoCalls() - before; calls != 1 {
		t.Errorf("Step(StepArm) made %d cgo calls, want 1", calls)
	}
	reap(41, n)
	if _, err := c.cch.Wait(ctx); err != nil {
		t.Fatalf("no event after Step(StepArm): %v", err)
	}
}

// checkWaitReadyStepTakesEvent: WaitReady returns once an armed CQ's event is on
// the channel, and Step(StepTakeEvent) takes that event in its one
// crossing, so none is left for Wait to read; with no event left it is no
// error. Wait reads the channel before it parks, so a left-over event would
// make it return instead of reaching its deadline.
func checkWaitReadyStepTakesEvent(t *testing.T, ctx context.Context, p *pair, raddr uint64, rkey uint32) {
	c := p.client
	var wc [4]wr.Completion
	n, err := c.qp.Step(c.cq, verbs.StepArm, nil, []wr.Send{{ID: 42, Op: wr.OpWrite, Signaled: true, RemoteAddr: raddr, RKey: rkey}}, wc[:], 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cch.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady after Step(StepArm): %v", err)
	}
	before, takes := verbs.CgoCalls(), uint64(0)
	for have := n; have == 0; takes++ {
		m, err := c.qp.Step(c.cq, verbs.StepTakeEvent, nil, nil, wc[n:], 1)
		if err != nil {
			t.Fatal(err)
		}
		have, n = m, n+m
	}
	if n != 1 || wc[0].ID != 42 || wc[0].Status != wr.WCSuccess {
		t.Fatalf("completions %+v (%d), want write 42's", wc[:n], n)
	}
	if calls := verbs.CgoCalls() - before; calls != takes {
		t.Errorf("%d Step(StepTakeEvent) calls made %d cgo calls, want one each", takes, calls)
	}
	if m, err := c.qp.Step(c.cq, verbs.StepTakeEvent, nil, nil, wc[:], 1); m != 0 || err != nil {
		t.Fatalf("Step(StepTakeEvent) on an empty channel and CQ = %d, %v", m, err)
	}
	c.cch.SetDeadline(time.Now().Add(20 * time.Millisecond))
	defer c.cch.SetDeadline(time.Time{})
	if cq, err := c.cch.Wait(ctx); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Wait after Step(StepTakeEvent) = %v, %v: the event was left on the channel", cq, err)
	}
}

// checkStepTakeEventArmRearms: Step(StepTakeEvent|StepArm) leaves the CQ armed, so a
// completion that comes after it (here, of a write posted without any arm)
// still wakes WaitReady. checkWaitReadyStepTakesEvent left the CQ unarmed and
// the channel empty; without the arm the WaitReady below would reach its
// deadline.
func checkStepTakeEventArmRearms(t *testing.T, ctx context.Context, p *pair, raddr uint64, rkey uint32) {
	c := p.client
	write := func(id uint64) []wr.Send {
		return []wr.Send{{ID: id, Op: wr.OpWrite, Signaled: true, RemoteAddr: raddr, RKey: rkey}}
	}
	var wc [4]wr.Completion
	waitReady := func(what string) {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := c.cch.WaitReady(wctx); err != nil {
			t.Fatalf("WaitReady %s: %v", what, err)
		}
	}
	// takeUntil takes the event (re-arming) at least once, and until write
	// id's completion is in; have says it was polled already.
	takeUntil := func(id uint64, have int) {
		for took := false; !took || have == 0; took = true {
			before := verbs.CgoCalls()
			n, err := c.qp.Step(c.cq, verbs.StepTakeEvent|verbs.StepArm, nil, nil, wc[have:], 1)
			if err != nil {
				t.Fatal(err)
			}
			if calls := verbs.CgoCalls() - before; calls != 1 {
				t.Errorf("Step(StepTakeEvent|StepArm) made %d cgo calls, want 1", calls)
			}
			have += n
		}
		if have != 1 || wc[0].ID != id || wc[0].Status != wr.WCSuccess {
			t.Fatalf("completions %+v (%d), want write %d's", wc[:have], have, id)
		}
	}
	n, err := c.qp.Step(c.cq, verbs.StepArm, nil, write(43), wc[:], 1)
	if err != nil {
		t.Fatal(err)
	}
	waitReady("after Step(StepArm)")
	takeUntil(43, n)
	if _, err := c.qp.PostSend(write(44)); err != nil {
		t.Fatal(err)
	}
	waitReady("for a completion after Step(StepTakeEvent|StepArm)")
	takeUntil(44, 0)
}

// checkStepTries: Step with tries keeps polling an empty CQ inside
// its one crossing until a completion comes. The server's call starts on an
// empty CQ and is seen inside C before the client writes, so a call that
// polled once would return empty; it must return the receive's completion.
func checkStepTries(t *testing.T, ctx context.Context, p *pair, raddr uint64, rkey uint32) {
	s := p.server
	var wc [4]wr.Completion
	before := verbs.CgoCalls()
	if n, err := s.qp.Step(s.cq, 0, nil, nil, wc[:], 8); n != 0 || err != nil {
		t.Fatalf("Step with tries on an empty CQ = %d, %v", n, err)
	}
	if calls := verbs.CgoCalls() - before; calls != 1 {
		t.Errorf("Step with tries made %d cgo calls, want 1", calls)
	}
	// The server has receives left from checkHotPathCost.
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Tries enough for seconds of polling: the write comes long before.
		n, err := s.qp.Step(s.cq, 0, nil, nil, wc[:], 1<<30)
		done <- result{n, err}
	}()
	var early *result
	for early == nil && !inCgoCall("verbs.(*QP).Step") {
		select {
		case r := <-done:
			early = &r
		default:
			runtime.Gosched()
		}
	}
	if early != nil {
		t.Fatalf("Step with tries returned %d, %v before any completion came: it polled once", early.n, early.err)
	}
	buf := p.client.mr.Bytes()
	buf[0] = 'x'
	write := wr.Send{ID: 51, Op: wr.OpWriteImm, Imm: 7, Inline: true, Signaled: true, NumSGE: 1,
		SGE:        [2]wr.SGE{{Addr: p.client.mr.Addr(), Length: 1, LKey: p.client.mr.LKey()}},
		RemoteAddr: raddr, RKey: rkey}
	if _, err := p.client.qp.PostSend([]wr.Send{write}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.n != 1 || wc[0].Opcode != wr.WCRecvRDMAWithImm || wc[0].Status != wr.WCSuccess || wc[0].Imm != 7 {
		t.Fatalf("Step with tries = %d, %v (%+v), want the receive's completion", r.n, r.err, wc[0])
	}
	if wc := p.client.completion(t, ctx); wc.ID != 51 || wc.Status != wr.WCSuccess {
		t.Fatalf("write completion %+v", wc)
	}
}

// inCgoCall reports whether a goroutine is inside a cgo call made from fn.
func inCgoCall(fn string) bool {
	for _, st := range procstat.Stacks() {
		if strings.Contains(st, "[syscall") && strings.Contains(st, fn) {
			return true
		}
	}
	return false
}

// disconnect closes the connection from the client side the way rsocket
// does: the side that sees DISCONNECTED answers with its own rdma_disconnect
// (on IB/RoCE that sends the DREP the initiator's DISCONNECTED waits for).
func (p *pair) disconnect(t testing.TB, ctx context.Context) {
	t.Helper()
	if err := p.client.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.server.id.Await(ctx, EventDisconnected); err != nil {
		t.Fatal(err)
	}
	if err := p.server.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.client.id.Await(ctx, EventDisconnected); err != nil {
		t.Fatal(err)
	}
}
