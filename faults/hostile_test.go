//go:build linux && cgo

package faults

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
	"github.com/rnet-dev/rnet/rnet"
)

// fakePeer is a fake rsocket engine made of raw verbs: it connects with
// rsocket private data describing buffers it registered, and then posts
// whatever RDMA WRITE (WITH IMMEDIATE) work requests a test tells it to,
// right or wrong.
type fakePeer struct {
	t     testing.TB
	ctx   context.Context
	ch    *cm.EventChannel
	id    *cm.ID
	pd    *verbs.PD
	cc    *verbs.CompChannel
	cq    *verbs.CQ
	qp    *verbs.QP
	rbuf  *verbs.MR // what the rnet side may write our data into
	tgt   *verbs.MR // our target SGL
	sbuf  *verbs.MR // what we send from
	peer  ring.ConnData
	next  uint64 // ID of the next send
	recvs uint64
}

const (
	fakeCredits = 64
	fakeRbuf    = 64 << 10
)

// dialFake connects a fake peer from the client address to target.
func dialFake(t testing.TB, pair rdmatest.Pair, target netip.AddrPort) *fakePeer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	p := &fakePeer{t: t, ctx: ctx}
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			p.close()
			t.Fatal(err)
		}
	}
	p.ch, err = cm.NewEventChannel()
	must(err)
	p.id, err = p.ch.NewID()
	must(err)
	must(p.id.Resolve(ctx, pair.Client, target, cm.Retry{Tries: 3, Timeout: 2 * time.Second}))
	vctx, err := p.id.Context()
	must(err)
	p.pd, err = vctx.AllocPD()
	must(err)
	p.cc, err = vctx.NewCompChannel()
	must(err)
	p.cq, err = vctx.NewCQ(512, p.cc)
	must(err)
	p.rbuf, err = p.pd.RegisterMR(fakeRbuf, verbs.AccessRemoteWrite)
	must(err)
	p.tgt, err = p.pd.RegisterMR(ring.TargetSGLEntries*ring.RemoteSGESize, verbs.AccessRemoteWrite)
	must(err)
	p.sbuf, err = p.pd.RegisterMR(1<<20, verbs.AccessLocalWrite)
	must(err)
	p.qp, err = p.id.CreateQP(p.pd, p.cq, p.cq, verbs.QPCaps{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 64})
	must(err)
	// Receives for the rnet side's credit updates, without buffers.
	recvs := make([]wr.Recv, fakeCredits+16)
	for i := range recvs {
		recvs[i] = wr.Recv{ID: 1<<63 | uint64(i)}
	}
	_, err = p.qp.PostRecv(recvs)
	must(err)
	cd := ring.ConnData{
		Version: 1, Flags: ring.FlagIOMap, Credits: fakeCredits,
		TargetSGL: ring.RemoteSGE{Addr: p.tgt.Addr(), Key: p.tgt.RKey(), Length: ring.TargetSGLEntries},
		DataBuf:   ring.RemoteSGE{Addr: p.rbuf.Addr(), Key: p.rbuf.RKey(), Length: fakeRbuf / 2},
	}
	pd := cd.Encode()
	must(p.id.Connect(cm.RsocketConnParam(pd[:])))
	ev, err := p.id.Await(ctx, cm.EventEstablished)
	must(err)
	p.peer, err = ring.DecodeConnData(ev.Param.PrivateData)
	must(err)
	return p
}

// close tears the fake peer down, QP first and the id last.
func (p *fakePeer) close() {
	if p.id != nil {
		p.id.Disconnect()
	}
	for _, c := range []interface{ Close() error }{p.qp, p.cq, p.cc, p.rbuf, p.tgt, p.sbuf, p.pd, p.id, p.ch} {
		if c != nil && !isNilCloser(c) {
			c.Close()
		}
	}
}

func isNilCloser(c interface{ Close() error }) bool {
	switch v := c.(type) {
	case *verbs.QP:
		return v == nil
	case *verbs.CQ:
		return v == nil
	case *verbs.CompChannel:
		return v == nil
	case *verbs.MR:
		return v == nil
	case *verbs.PD:
		return v == nil
	case *cm.ID:
		return v == nil
	case *cm.EventChannel:
		return v == nil
	}
	return false
}

// write posts an RDMA WRITE of payload to remote (with the immediate m when
// imm is set) and waits for its completion, which it returns.
func (p *fakePeer) write(remote ring.RemoteSGE, payload []byte, imm bool, m ring.Msg) wr.Completion {
	p.t.Helper()
	copy(p.sbuf.Bytes(), payload)
	w := wr.Send{ID: p.next, Op: wr.OpWrite, Signaled: true, RemoteAddr: remote.Addr, RKey: remote.Key}
	if imm {
		w.Op, w.Imm = wr.OpWriteImm, uint32(m)
	}
	if len(payload) > 0 {
		w.NumSGE = 1
		w.SGE[0] = wr.SGE{Addr: p.sbuf.Addr(), Length: uint32(len(payload)), LKey: p.sbuf.LKey()}
	}
	p.next++
	if _, err := p.qp.PostSend([]wr.Send{w}); err != nil {
		p.t.Fatalf("post %v: %v", m, err)
	}
	for {
		wc := p.completion()
		if wc.ID&(1<<63) != 0 {
			p.recvs++ // the rnet side's credit update: ignored
			continue
		}
		return wc
	}
}

// msg sends a message word with the given payload into the rnet side's rbuf
// at offset off of its first half.
func (p *fakePeer) msg(m ring.Msg, off uint32, payload []byte) wr.Completion {
	p.t.Helper()
	dst := p.peer.DataBuf
	dst.Addr += uint64(off)
	return p.write(dst, payload, true, m)
}

// sgl sends a credit message that writes an SGL update into entry i of the
// rnet side's target SGL, as rsocket does (one RDMA WRITE WITH IMMEDIATE),
// in its byte order (this host's: the lab is one machine). size trims the
// 16-byte rs_sge.
func (p *fakePeer) sgl(i int, s ring.RemoteSGE, m ring.Msg, size int) {
	p.t.Helper()
	var b [ring.RemoteSGESize]byte
	binary.NativeEndian.PutUint64(b[0:], s.Addr)
	binary.NativeEndian.PutUint32(b[8:], s.Key)
	binary.NativeEndian.PutUint32(b[12:], s.Length)
	dst := p.peer.TargetSGL
	dst.Addr += uint64(i * ring.RemoteSGESize)
	if wc := p.write(dst, b[:size], true, m); wc.Status != wr.WCSuccess {
		p.t.Fatalf("SGL write: %v", verbs.CompletionErr(&wc, p.qp.Num()))
	}
}

// half is half i of our rbuf as an SGL update advertises it.
func (p *fakePeer) half(i int) ring.RemoteSGE {
	return ring.RemoteSGE{Addr: p.rbuf.Addr() + uint64(i*fakeRbuf/2), Key: p.rbuf.RKey(), Length: fakeRbuf / 2}
}

func (p *fakePeer) completion() wr.Completion {
	p.t.Helper()
	var wc [1]wr.Completion
	for {
		if n, err := p.cq.Poll(wc[:]); err != nil {
			p.t.Fatal(err)
		} else if n == 1 {
			return wc[0]
		}
		if err := p.cq.ReqNotify(false); err != nil {
			p.t.Fatal(err)
		}
		if n, err := p.cq.Poll(wc[:]); err != nil {
			p.t.Fatal(err)
		} else if n == 1 {
			return wc[0]
		}
		if _, err := p.cc.Wait(p.ctx); err != nil {
			p.t.Fatalf("waiting for a completion: %v", err)
		}
	}
}

// hostileCase is one way to break the protocol, and the check it must trip.
type hostileCase struct {
	name  string
	check error
	act   func(t *testing.T, p *fakePeer)
}

func hostileCases() []hostileCase {
	data := func(n uint32) ring.Msg { return ring.MakeMsg(ring.MsgData, n) }
	sgl := func(n uint32) ring.Msg { return ring.MakeMsg(ring.MsgSGL, n) }
	half := func(p *fakePeer) uint32 { return p.peer.DataBuf.Length }
	cases := []hostileCase{
		{"DataBeyondGrant", ring.ErrDataOverrun, func(t *testing.T, p *fakePeer) {
			// Half of rbuf was granted; write one byte more, really.
			n := half(p) + 1
			p.msg(data(n), 0, pool[:n])
		}},
		{"DataStraddlesGrant", ring.ErrDataOverrun, func(t *testing.T, p *fakePeer) {
			p.msg(data(half(p)-10), 0, pool[:half(p)-10])
			p.msg(data(20), half(p)-10, pool[:20])
		}},
		{"ClaimBeyondWrite", ring.ErrBadMessage, func(t *testing.T, p *fakePeer) {
			p.msg(data(ring.MaxMsgData), 0, nil) // claims 512 MiB, writes nothing
		}},
		{"ClaimLongerThanWrite", ring.ErrBadMessage, func(t *testing.T, p *fakePeer) {
			p.msg(data(20), 0, pool[:10]) // within the grant, but 10 bytes short
		}},
		{"TooManyMessages", ring.ErrCreditOverrun, func(t *testing.T, p *fakePeer) {
			// Nobody reads on the rnet side, so no credits come back.
			for i := uint32(0); i <= uint32(p.peer.Credits); i++ {
				p.msg(data(1), i, pool[i:i+1])
			}
		}},
		{"UnknownControl", ring.ErrBadControl, func(t *testing.T, p *fakePeer) {
			p.msg(ring.MakeMsg(ring.MsgCtrl, 7), 0, nil)
		}},
		{"IOMapSGL", ring.ErrUnexpectedIOMap, func(t *testing.T, p *fakePeer) {
			p.msg(ring.MakeMsg(ring.MsgIOMapSGL, 0), 0, nil)
		}},
		// An SGL update advertises space in the sender's memory (ours)
		// that the rnet side may write next. On RoCE any region, key and
		// length up to ring.MaxBufSize is taken (a receiver may move its
		// ring, and a bad key only fails the writes into the peer's own
		// memory); only a length no receiver can mean is refused.
		{"SGLZeroLength", ring.ErrBadSGL, func(t *testing.T, p *fakePeer) {
			h := p.half(1)
			h.Length = 0
			p.sgl(1, h, sgl(fakeCredits), 16)
		}},
		{"SGLHugeLength", ring.ErrBadSGL, func(t *testing.T, p *fakePeer) {
			h := p.half(1)
			h.Length = ring.MaxBufSize + 1
			p.sgl(1, h, sgl(fakeCredits), 16)
		}},
		{"SGLTruncated", ring.ErrBadSGL, func(t *testing.T, p *fakePeer) {
			p.sgl(1, p.half(1), sgl(fakeCredits), 8)
		}},
		{"SGLOutOfOrder", ring.ErrUnexpectedSGL, func(t *testing.T, p *fakePeer) {
			p.sgl(0, p.half(0), sgl(fakeCredits), 16) // entry 1 must come first
		}},
		{"SGLWhileInUse", ring.ErrUnexpectedSGL, func(t *testing.T, p *fakePeer) {
			p.sgl(1, p.half(1), sgl(fakeCredits), 16) // correct
			// The rnet side has not written a byte into the first half
			// yet: it cannot have been freed.
			p.sgl(0, p.half(0), sgl(fakeCredits), 16)
		}},
		{"CreditsTakenBack", ring.ErrBadCredits, func(t *testing.T, p *fakePeer) {
			p.msg(sgl(fakeCredits-1), 0, nil)
		}},
		{"CreditsBeyondQueue", ring.ErrBadCredits, func(t *testing.T, p *fakePeer) {
			p.msg(sgl(3*fakeCredits), 0, nil)
		}},
		{"DataAfterShutdown", ring.ErrDataAfterShutdown, func(t *testing.T, p *fakePeer) {
			p.msg(ring.MakeMsg(ring.MsgCtrl, ring.CtrlShutdown), 0, nil)
			p.msg(data(4), 0, []byte("evil"))
		}},
		{"DataAfterDisconnect", ring.ErrDataAfterDisconnect, func(t *testing.T, p *fakePeer) {
			p.msg(data(5), 0, []byte("hello"))
			p.msg(ring.MakeMsg(ring.MsgCtrl, ring.CtrlDisconnect), 0, nil)
			p.msg(data(4), 5, []byte("evil"))
		}},
	}
	for _, op := range []ring.MsgOp{ring.MsgRsvdDataMore, ring.MsgWrite, ring.MsgRsvdDRAMore, ring.MsgRsvd} {
		cases = append(cases, hostileCase{"ReservedOpcode" + op.String(), ring.ErrReservedOpcode, func(t *testing.T, p *fakePeer) {
			p.msg(ring.MakeMsg(op, 1), 0, pool[:1])
		}})
	}
	return cases
}

// TestHostilePeer connects fake peers that break the protocol, one way each,
// to one listener. Each must end its own connection with a typed error
// (rnet.ErrProtocol and the specific check) within a bounded time, while a
// well-behaved connection on the same listener keeps working throughout.
func TestHostilePeer(t *testing.T) {
	pair := rdmatest.Require(t)
	// A small credit window so that exceeding it is quick.
	// Linger of an hour: a Close that waited for a broken peer would hang,
	// which closeErrWithin reports, rather than pass after 10 s.
	cfg := &rnet.Config{RecvQueueSize: 16, SendBufferSize: 64 << 10, RecvBufferSize: 64 << 10, Linger: time.Hour}
	ln := listen(t, pair, cfg)
	target := ln.Addr().(*rnet.Addr).AddrPort
	good1, good2 := connect(t, pair, ln, cfg)
	defer good1.Close()
	defer good2.Close()
	before := takeSnapshot(t)

	tried := 0
	for _, tc := range hostileCases() {
		t.Run(tc.name, func(t *testing.T) {
			p := dialFake(t, pair, target)
			defer p.close()
			c, err := ln.AcceptRDMA()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tc.act(t, p)
			tried++
			// Every work request above has completed at the fake peer, so
			// the rnet side's NIC has taken it; its software must now
			// notice. Read returns the data that came before the
			// violation, or EOF after the peer's DISCONNECT/SHUTDOWN,
			// until the violation itself is accounted.
			start := time.Now()
			c.SetReadDeadline(start.Add(wait))
			buf := make([]byte, 256<<10)
			for {
				_, err = c.Read(buf)
				if err == io.EOF {
					// Reading again after EOF returns EOF until the
					// rest of what the fake peer sent is accounted.
					if time.Since(start) > wait {
						break
					}
					// Let the goroutines that account the violation run
					// on these two CPUs.
					runtime.Gosched()
					continue
				}
				if err != nil {
					break
				}
			}
			took := time.Since(start)
			if !errors.Is(err, rnet.ErrProtocol) || !errors.Is(err, tc.check) {
				t.Fatalf("Read after %s = %v, want rnet.ErrProtocol and %v", tc.name, err, tc.check)
			}
			var pe *rnet.ProtocolError
			if !errors.As(err, &pe) || !errors.Is(pe.Check, tc.check) {
				t.Errorf("%v is not an *rnet.ProtocolError for %v", err, tc.check)
			}
			if _, werr := c.Write([]byte("x")); werr == nil {
				t.Errorf("Write after %s succeeded", tc.name)
			}
			t.Logf("%s: %v after %v", tc.name, err, took.Round(time.Microsecond))
			// The peer hears that the connection is over while the
			// application still holds it: its queue pair went down with it.
			told, cancel := context.WithTimeout(context.Background(), wait)
			_, derr := p.id.Await(told, cm.EventDisconnected)
			cancel()
			if derr != nil {
				t.Fatalf("the peer was not disconnected after %s while the connection stayed open: %v", tc.name, derr)
			}
			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Errorf("Close: %v", err)
				}
			case <-time.After(wait): // a hang detector, not a timing check
				t.Fatalf("Close after %s waits for the broken peer", tc.name)
			}
			// The well-behaved connection on the same listener is unaffected.
			roundTrip(t, good1, good2, "still fine after "+tc.name)
			roundTrip(t, good2, good1, "both ways")
		})
	}
	t.Logf("%d hostile inputs tried, each ended its own connection with its typed error", tried)
	// A new well-behaved connection still comes through, and the hostile
	// ones left nothing behind.
	c1, c2 := connect(t, pair, ln, cfg)
	roundTrip(t, c1, c2, "new connection after hostile peers")
	c1.Close()
	c2.Close()
	checkNoLeaks(t, before, "hostile peers")
}
