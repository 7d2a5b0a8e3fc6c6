//go:build cgo

package cm

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// testTimeout bounds every wait: the guest runs under TCG, so generously.
const testTimeout = 60 * time.Second

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// endpoint is one side of a test connection: its id and the verbs objects
// made on the id's device.
type endpoint struct {
	id  *ID
	pd  *verbs.PD
	cch *verbs.CompChannel
	cq  *verbs.CQ
	mr  *verbs.MR
	qp  *verbs.QP
}

func newEndpoint(t testing.TB, id *ID, mrAccess verbs.Access) *endpoint {
	t.Helper()
	ctx, err := id.Context()
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{id: id}
	if e.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cch, err = ctx.NewCompChannel(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = ctx.NewCQ(64, e.cch); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.RegisterMR(8192, mrAccess); err != nil {
		t.Fatal(err)
	}
	e.qp, err = id.CreateQP(e.pd, e.cq, e.cq, verbs.QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 64})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// close tears down in the order the verbs require: QP, then CQ and its
// channel, MR, PD, and last the id.
func (e *endpoint) close(t testing.TB) {
	t.Helper()
	for _, c := range []interface{ Close() error }{e.qp, e.cq, e.cch, e.mr, e.pd, e.id} {
		if err := c.Close(); err != nil {
			t.Errorf("close %T: %v", c, err)
		}
	}
}

// completion waits for one completion: poll, arm, poll again (a completion
// may have arrived before arming), then sleep on the channel.
func (e *endpoint) completion(t testing.TB, ctx context.Context) wr.Completion {
	t.Helper()
	var wc [1]wr.Completion
	for {
		if n, err := e.cq.Poll(wc[:]); err != nil {
			t.Fatal(err)
		} else if n == 1 {
			return wc[0]
		}
		if err := e.cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		if n, err := e.cq.Poll(wc[:]); err != nil {
			t.Fatal(err)
		} else if n == 1 {
			return wc[0]
		}
		if _, err := e.cch.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// listen opens a listener on addr (port 0 picks one) with its own channel.
func listen(t testing.TB, addr netip.Addr) (*EventChannel, *ID, netip.AddrPort) {
	t.Helper()
	ch, err := NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	id, err := ch.NewID()
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
		t.Fatal(err)
	}
	if err := id.Listen(16); err != nil {
		t.Fatal(err)
	}
	return ch, id, id.LocalAddr()
}

// dialID makes an id on its own channel and resolves dst from src.
func dialID(t testing.TB, ctx context.Context, src netip.Addr, dst netip.AddrPort) (*EventChannel, *ID) {
	t.Helper()
	ch, err := NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	id, err := ch.NewID()
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Resolve(ctx, src, dst, Retry{Tries: 3, Timeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	return ch, id
}
