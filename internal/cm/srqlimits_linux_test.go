//go:build cgo

package cm

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// A shared receive queue's limits and errors, and that a peer's key stays
// in its own protection domain.

// TestSRQLimitsAndErrors: sizes past the device's limit and use after Close
// fail with errors naming the call and the device.
func TestSRQLimitsAndErrors(t *testing.T) {
	t.Run("RoCE", func(t *testing.T) { testSRQLimitsAndErrors(t, rdmatest.Require(t)) })
	t.Run("iWARP", func(t *testing.T) { testSRQLimitsAndErrors(t, rdmatest.RequireIWARP(t)) })
}

func testSRQLimitsAndErrors(t *testing.T, addrs rdmatest.Pair) {
	lch, listener, _ := listen(t, addrs.Server)
	defer lch.Close()
	defer listener.Close()
	vctx, err := listener.Context()
	if err != nil {
		t.Fatal(err)
	}
	info, err := vctx.Query()
	if err != nil {
		t.Fatal(err)
	}
	pd, err := vctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	_, err = pd.NewSRQ(verbs.SRQCaps{MaxWR: uint32(info.MaxSRQWR) + 1, MaxSGE: 1})
	t.Logf("SRQ past max_srq_wr: %v", err)
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "ibv_create_srq "+info.Name) {
		t.Errorf("SRQ of %d receives on %s (max_srq_wr %d): %v, want EINVAL naming the call and device", info.MaxSRQWR+1, info.Name, info.MaxSRQWR, err)
	}
	srq, err := pd.NewSRQ(verbs.SRQCaps{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Devices may hold more than they granted (rxe rounds its ring up):
	// post one at a time until the SRQ refuses, within a bound.
	mr, err := pd.RegisterMR(4096, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	// A refill is one crossing into C per batch, without allocating.
	// AllocsPerRun posts twice: four receives, which every SRQ here holds.
	batch := []wr.Recv{recvWith(0, mr, 0), recvWith(1, mr, 4)}
	before := verbs.CgoCalls()
	allocs := testing.AllocsPerRun(1, func() {
		if _, err := srq.PostRecv(batch); err != nil {
			t.Fatal(err)
		}
	})
	if calls := verbs.CgoCalls() - before; calls != 2 {
		t.Errorf("two SRQ PostRecv batches made %d cgo calls, want 2", calls)
	}
	if allocs != 0 && !raceEnabled {
		t.Errorf("SRQ PostRecv allocates %v times per call", allocs)
	}
	held, limit := 4, 64*int(srq.Caps().MaxWR)
	for ; held < limit; held++ {
		if _, err = srq.PostRecv([]wr.Recv{recvWith(uint64(held), mr, 0)}); err != nil {
			break
		}
	}
	t.Logf("an SRQ granted %+v held %d receives; the next: %v", srq.Caps(), held, err)
	if held < int(srq.Caps().MaxWR) || !errors.Is(err, syscall.ENOMEM) && !errors.Is(err, syscall.EINVAL) {
		t.Errorf("SRQ granted %+v held %d receives, then %v", srq.Caps(), held, err)
	}
	err = srq.SetLimit(srq.Caps().MaxWR + 1)
	t.Logf("a limit past the SRQ's granted size: %v", err)
	if err := mr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("closing a PD with an SRQ in it: %v, want EBUSY", err)
	}
	if err := srq.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srq.SetLimit(1); !errors.Is(err, net.ErrClosed) {
		t.Errorf("SetLimit after Close: %v", err)
	}
}

// checkKeyStaysInItsPD: sharing an SRQ does not share protection domains:
// a peer that writes with another connection's key is refused, and that
// connection's buffer is untouched. (On siw the sender's completion does not
// wait for the peer's verdict, so this is checked on RoCE only.)
func checkKeyStaysInItsPD(t *testing.T, ctx context.Context, attacker, victim *srqConn) {
	before := bytes.Clone(victim.mr.Bytes())
	buf := attacker.client.mr
	copy(buf.Bytes(), "overwritten by another connection")
	if _, err := attacker.client.qp.PostSend([]wr.Send{{ID: 50, Op: wr.OpWrite, Signaled: true, NumSGE: 1,
		SGE:        [2]wr.SGE{{Addr: buf.Addr(), Length: 32, LKey: buf.LKey()}},
		RemoteAddr: victim.mr.Addr(), RKey: victim.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	wc := attacker.client.completion(t, ctx)
	t.Logf("a write with another connection's key: %v", wc.Status)
	if wc.Status != wr.WCRemAccessErr {
		t.Errorf("a write with another connection's key completed %v, want IBV_WC_REM_ACCESS_ERR", wc.Status)
	}
	if !bytes.Equal(victim.mr.Bytes(), before) {
		t.Error("a write with another connection's key changed that connection's buffer")
	}
}
