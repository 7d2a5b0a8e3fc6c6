//go:build cgo

package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// The connection manager's failures and edges: failed completions, use
// after close, dials nobody answers or that are refused, and closes that
// race a disconnect.

// A failed completion names the status, the opcode and the QP: write to a
// key the peer never granted.
func TestCompletionErrorNamesStatus(t *testing.T) {
	addrs := rdmatest.Require(t)
	ctx := testCtx(t)
	p := connect(t, ctx, addrs.Client, addrs.Server, []byte("x"))
	defer p.close(t)
	raddr := binary.BigEndian.Uint64(p.fromServer[0:8])
	w := wr.Send{ID: 99, Op: wr.OpWrite, Signaled: true, NumSGE: 1,
		SGE:        [2]wr.SGE{{Addr: p.client.mr.Addr(), Length: 8, LKey: p.client.mr.LKey()}},
		RemoteAddr: raddr, RKey: p.server.mr.RKey() ^ 0x5a5a00}
	if _, err := p.client.qp.PostSend([]wr.Send{w}); err != nil {
		t.Fatal(err)
	}
	wc := p.client.completion(t, ctx)
	err := verbs.CompletionErr(&wc, p.client.qp.Num())
	var we *verbs.WCError
	if !errors.As(err, &we) || we.Status != wr.WCRemAccessErr || we.QPNum != p.client.qp.Num() || we.ID != 99 {
		t.Fatalf("completion %+v: %v, want IBV_WC_REM_ACCESS_ERR on QP %#x", wc, err, p.client.qp.Num())
	}
	t.Log(err)
}

// Posting after the QP is gone is an error, not a crash.
func TestUseAfterClose(t *testing.T) {
	addrs := rdmatest.Require(t)
	ctx := testCtx(t)
	p := connect(t, ctx, addrs.Client, addrs.Server, nil)
	p.close(t)
	p.close(t) // idempotent
	if _, err := p.client.qp.PostSend([]wr.Send{{Op: wr.OpWrite}}); err == nil {
		t.Error("PostSend after close succeeded")
	}
	if _, err := p.client.qp.PostRecv([]wr.Recv{{}}); err == nil {
		t.Error("PostRecv after close succeeded")
	}
	if err := p.client.id.Connect(ConnParam{}); err == nil {
		t.Error("Connect after close succeeded")
	}
	if _, err := p.lch.Next(ctx); err == nil {
		t.Error("Next after close succeeded")
	}
	if p.client.id.RemoteAddr().IsValid() {
		t.Error("RemoteAddr after close")
	}
}

// unusedPort finds a port nothing listens on by listening and closing.
func unusedPort(t testing.TB, addr netip.Addr) netip.AddrPort {
	ch, id, ap := listen(t, addr)
	id.Close()
	ch.Close()
	return ap
}

func TestConnectNoListener(t *testing.T) {
	addrs := rdmatest.Require(t)
	ctx := testCtx(t)
	dst := unusedPort(t, addrs.Server)
	ch, id := dialID(t, ctx, addrs.Client, dst)
	defer ch.Close()
	e := newEndpoint(t, id, verbs.AccessLocalWrite)
	defer e.close(t)
	start := time.Now()
	if err := id.Connect(RsocketConnParam([]byte("anyone?"))); err != nil {
		t.Fatal(err)
	}
	ev, err := id.Await(ctx, EventEstablished)
	t.Logf("connect to %v with no listener: event %v status %d after %v: %v", dst, ev.Type, ev.Status, time.Since(start), err)
	var re *RejectError
	switch {
	case errors.As(err, &re):
		if !re.NoListener() || re.ByApplication() {
			t.Errorf("reject %v not reported as 'nothing listens'", err)
		}
	case errors.Is(err, ErrUnreachable):
	default:
		t.Fatalf("got %v, want a reject (no listener) or unreachable", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("%v is not ECONNREFUSED", err)
	}
}

func TestConnectRejectedByListener(t *testing.T) {
	addrs := rdmatest.Require(t)
	ctx := testCtx(t)
	lch, lid, dst := listen(t, addrs.Server)
	defer lch.Close()
	defer lid.Close()
	ch, id := dialID(t, ctx, addrs.Client, dst)
	defer ch.Close()
	e := newEndpoint(t, id, verbs.AccessLocalWrite)
	defer e.close(t)
	if err := id.Connect(RsocketConnParam([]byte{2})); err != nil { // "version 2"
		t.Fatal(err)
	}
	req, err := lch.Next(ctx)
	if err != nil || req.Type != EventConnectRequest {
		t.Fatalf("listener: %v, %v", &req, err)
	}
	if err := req.ID.Reject([]byte("bad version")); err != nil {
		t.Fatal(err)
	}
	if err := req.ID.Close(); err != nil {
		t.Fatal(err)
	}
	ev, err := id.Await(ctx, EventEstablished)
	t.Logf("explicit reject: event %v status %d: %v", ev.Type, ev.Status, err)
	var re *RejectError
	if !errors.As(err, &re) || !re.ByApplication() {
		t.Fatalf("got %v, want a RejectError by the application", err)
	}
	if !bytes.HasPrefix(re.PrivateData, []byte("bad version")) {
		t.Errorf("reject private data %q", re.PrivateData)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("%v is not ECONNREFUSED", err)
	}
}

// An address nobody answers for: resolution ends with a timeout error
// within (about) the time asked, and retries double it.
func TestResolveUnansweredAddressTimesOut(t *testing.T) {
	addrs := rdmatest.Require(t)
	ctx := testCtx(t)
	b := addrs.Server.As4()
	b[3] = 99 // 10.77.0.99 in the lab: on the link, but no one has it
	dst := netip.AddrPortFrom(netip.AddrFrom4(b), 7471)
	for _, r := range []Retry{{Tries: 1, Timeout: 500 * time.Millisecond}, {Tries: 2, Timeout: 300 * time.Millisecond}} {
		ch, err := NewEventChannel()
		if err != nil {
			t.Fatal(err)
		}
		id, err := ch.NewID()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = id.Resolve(ctx, addrs.Client, dst, r)
		took := time.Since(start)
		t.Logf("resolve %v with %+v: %v after %v", dst, r, err, took)
		if !errors.Is(err, syscall.ETIMEDOUT) {
			t.Errorf("got %v, want ETIMEDOUT", err)
		}
		id.Close()
		ch.Close()
	}
}

// Waiting on the event channel honours contexts, deadlines and Close.
func TestEventChannelWaits(t *testing.T) {
	rdmatest.Require(t)
	ch, err := NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := ch.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Next with expiring context = %v", err)
	}
	ch.SetDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := ch.Next(context.Background()); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Next past deadline = %v", err)
	}
	ch.SetDeadline(time.Time{})
	done := make(chan error)
	procstat.StartParked(t, func() { _, err := ch.Next(context.Background()); done <- err })
	ch.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Next during Close = %v", err)
	}
}

// TestDisconnectQPCloseAndCloseAtOnce: rdma_disconnect moves the id's QP to
// the error state while rdma_destroy_qp may be freeing it, unless the two
// exclude each other; and id.Close destroys the QP too, so the locks they
// take must not deadlock. The use-after-free this guards against shows
// only by chance (a crash, or memory damage); a deadlock shows every time.
func TestDisconnectQPCloseAndCloseAtOnce(t *testing.T) {
	addrs := rdmatest.Require(t)
	ctx := testCtx(t)
	for range 10 {
		p := connect(t, ctx, addrs.Client, addrs.Server, nil)
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		for _, f := range []func() error{p.client.id.Disconnect, p.client.qp.Close, p.client.id.Close} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- f()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			// Disconnect after the id is gone fails as a closed id; any
			// other failure is a bug.
			if err != nil && !errors.Is(err, net.ErrClosed) {
				t.Errorf("%v", err)
			}
		}
		p.close(t)
	}
}
