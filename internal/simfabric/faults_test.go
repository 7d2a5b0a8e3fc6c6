package simfabric

import (
	"bytes"
	"testing"

	"github.com/rnet-dev/rnet/internal/wr"
)

// drain steps the fabric until nothing moves and returns what e completed.
func drain(p *pair, e *Endpoint) []wr.Completion {
	var wcs []wr.Completion
	for range 100 {
		p.f.Step()
		wcs = append(wcs, poll(e)...)
	}
	return wcs
}

// A failed queue pair completes its oldest send with the device's status
// and flushes the rest; what it had on the wire never lands; its peer is
// not told, and learns only when it sends.
func TestFailLikeADeviceError(t *testing.T) {
	p := newPair(t, Options{MaxWireDelay: 5, MaxCompletionDelay: 2})
	if err := p.a.PostRecv([]wr.Recv{{ID: 10}, {ID: 11}}); err != nil {
		t.Fatal(err)
	}
	if err := p.b.PostRecv([]wr.Recv{{ID: 20}, {ID: 21}}); err != nil {
		t.Fatal(err)
	}
	copy(p.aMem.Buf, "lost on the wire")
	if err := p.a.PostSend([]wr.Send{p.write(1, 0, 8, true), p.write(2, 8, 8, true)}); err != nil {
		t.Fatal(err)
	}
	p.a.Fail(wr.WCRetryExcErr)
	p.a.Fail(wr.WCGeneralErr) // failing again changes nothing

	got := map[uint64]wr.WCStatus{}
	for _, wc := range drain(p, p.a) {
		got[wc.ID] = wc.Status
	}
	want := map[uint64]wr.WCStatus{1: wr.WCRetryExcErr, 2: wr.WCWRFlushErr, 10: wr.WCWRFlushErr, 11: wr.WCWRFlushErr}
	if len(got) != len(want) {
		t.Fatalf("completions %v, want %v", got, want)
	}
	for id, st := range want {
		if got[id] != st {
			t.Fatalf("completions %v, want %v", got, want)
		}
	}
	if wcs := drain(p, p.b); len(wcs) != 0 {
		t.Fatalf("the peer completed %v", wcs)
	}
	if !bytes.Equal(p.bMem.Buf[:16], make([]byte, 16)) {
		t.Fatalf("bytes on the wire landed: %q", p.bMem.Buf[:16])
	}
	if st := p.b.Stats(); st.ErrorCompletion != 0 || p.b.QueuedRecvs() != 2 {
		t.Fatalf("the peer's queue pair changed: %+v, %d receives", st, p.b.QueuedRecvs())
	}

	// The peer's next send finds nobody: retries exhausted.
	bw := wr.Send{ID: 30, Op: wr.OpWriteImm, Signaled: true, NumSGE: 1,
		SGE:        [2]wr.SGE{{Addr: p.bMem.Addr, Length: 4, LKey: p.bMem.LKey}},
		RemoteAddr: p.aMem.Addr, RKey: p.aMem.RKey}
	if err := p.b.PostSend([]wr.Send{bw}); err != nil {
		t.Fatal(err)
	}
	// Its queue pair then goes to error too, flushing its receives.
	wcs := drain(p, p.b)
	retried := 0
	for _, wc := range wcs {
		switch {
		case wc.ID == 30 && wc.Status == wr.WCRetryExcErr:
			retried++
		case wc.ID != 30 && wc.Status == wr.WCWRFlushErr:
		default:
			t.Fatalf("the peer completed %v, want its send WCRetryExcErr and the rest flushed", wcs)
		}
	}
	if retried != 1 || len(wcs) != 3 {
		t.Fatalf("the peer completed %v, want its send WCRetryExcErr and 2 receives flushed", wcs)
	}

	// Whatever the failed side posts now is flushed.
	if err := p.a.PostSend([]wr.Send{p.write(3, 0, 4, true)}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostRecv([]wr.Recv{{ID: 12}}); err != nil {
		t.Fatal(err)
	}
	later := drain(p, p.a)
	if len(later) != 2 || later[0].Status != wr.WCWRFlushErr || later[1].Status != wr.WCWRFlushErr {
		t.Fatalf("posts after the failure completed %v", later)
	}
}

// With no send outstanding, the failure shows on the oldest receive, as a
// connection that only reads learns of it.
func TestFailShowsOnAReceive(t *testing.T) {
	p := newPair(t, Options{Auto: true})
	if err := p.a.PostRecv([]wr.Recv{{ID: 10}, {ID: 11}}); err != nil {
		t.Fatal(err)
	}
	p.a.Fail(wr.WCGeneralErr)
	wcs := poll(p.a)
	if len(wcs) != 2 || wcs[0].ID != 10 || wcs[0].Status != wr.WCGeneralErr ||
		wcs[1].ID != 11 || wcs[1].Status != wr.WCWRFlushErr {
		t.Fatalf("completions %v", wcs)
	}
}

func TestFailNeedsAnErrorStatus(t *testing.T) {
	p := newPair(t, Options{Auto: true})
	defer func() {
		if recover() == nil {
			t.Fatal("Fail(WCSuccess) did not panic")
		}
	}()
	p.a.Fail(wr.WCSuccess)
}
