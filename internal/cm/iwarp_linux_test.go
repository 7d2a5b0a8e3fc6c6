//go:build cgo

package cm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// iWARP (siw) cannot write with immediate, so rsocket sends its message word
// as a 4-byte inline SEND into a receive with one SGE. Check that path, and
// what refusal looks like on iWARP.
func TestIWARPSendInlineAndRefused(t *testing.T) {
	addrs := rdmatest.RequireIWARP(t)
	ctx := testCtx(t)

	dst := unusedPort(t, addrs.Server)
	ch, id := dialID(t, ctx, addrs.Client, dst)
	e := newEndpoint(t, id, verbs.AccessLocalWrite)
	// siw makes the TCP connection inside rdma_connect, so a refusal may
	// come back from the call itself rather than as an event.
	err := id.Connect(RsocketConnParam(nil))
	if err == nil {
		var ev Event
		ev, err = id.Await(ctx, EventEstablished)
		t.Logf("iWARP connect with no listener: event %v status %d: %v", ev.Type, ev.Status, err)
	} else {
		t.Logf("iWARP connect with no listener: rdma_connect itself failed: %v", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, ErrUnreachable) {
		t.Errorf("got %v, want refused or unreachable", err)
	}
	e.close(t)
	ch.Close()

	// siw refuses a receive without SGE (EINVAL from ibv_post_recv), so
	// the first receive carries a 4-byte SGE.
	p := connectRecv(t, ctx, addrs.Client, addrs.Server, []byte("iwarp"), true)
	defer p.close(t)
	t.Logf("iWARP QP granted %+v on %s", p.client.qp.Caps(), p.client.pd.Context().Name())
	sbuf, rbuf := p.client.mr, p.server.mr
	binary.NativeEndian.PutUint32(sbuf.Bytes(), 0x20000010) // a message word in host order, as rsocket sends it
	if _, err := p.client.qp.PostSend([]wr.Send{{ID: 3, Op: wr.OpSend, Inline: true, Signaled: true, NumSGE: 1,
		SGE: [2]wr.SGE{{Addr: sbuf.Addr(), Length: 4, LKey: sbuf.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if wc := p.client.completion(t, ctx); wc.Status != wr.WCSuccess || wc.ID != 3 {
		t.Fatalf("send completion %+v", wc)
	}
	if wc := p.server.completion(t, ctx); wc.Status != wr.WCSuccess || wc.Opcode != wr.WCRecv || wc.ByteLen != 4 || wc.ID != 1 {
		t.Fatalf("receive completion %+v", wc)
	}
	// Write with immediate is not supported on siw: the post fails.
	_, err = p.client.qp.PostSend([]wr.Send{{ID: 4, Op: wr.OpWriteImm, Imm: 1, Signaled: true,
		RemoteAddr: rbuf.Addr(), RKey: rbuf.RKey()}})
	t.Logf("RDMA WRITE WITH IMMEDIATE on siw: %v", err)
	if err == nil {
		t.Error("RDMA WRITE WITH IMMEDIATE was posted on siw, which has no such operation")
	}
	if got := rbuf.Bytes()[4096:4100]; !bytes.Equal(got, sbuf.Bytes()[:4]) {
		t.Fatalf("received %x, want %x", got, sbuf.Bytes()[:4])
	}
	p.disconnect(t, ctx)
}
