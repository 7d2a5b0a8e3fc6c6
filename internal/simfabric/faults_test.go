package simfabric

import (
	"bytes"
	"maps"
	"slices"
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

// With no send outstanding, the failure shows on no receive: every one is
// flushed, as a device flushes them; the status belongs to a send.
func TestFailFlushesReceives(t *testing.T) {
	p := newPair(t, Options{Auto: true})
	if err := p.a.PostRecv([]wr.Recv{{ID: 10}, {ID: 11}}); err != nil {
		t.Fatal(err)
	}
	p.a.Fail(wr.WCGeneralErr)
	wcs := poll(p.a)
	if len(wcs) != 2 || wcs[0].ID != 10 || wcs[0].Status != wr.WCWRFlushErr ||
		wcs[1].ID != 11 || wcs[1].Status != wr.WCWRFlushErr {
		t.Fatalf("completions %v, want both receives flushed", wcs)
	}
}

// The failing send's completion, the cause, is visible at once and before
// the flushes it brings, however long completions otherwise take to show,
// on an endpoint's own CQ and on a shared one.
func TestFailCauseComesFirst(t *testing.T) {
	for _, shared := range []bool{false, true} {
		opts := Options{MaxWireDelay: 5, MaxCompletionDelay: 20}
		var p *pair
		var cq *CQ
		if shared {
			f := New(7, opts)
			cq = f.NewCQ(CQOptions{})
			p = sharedPairs(f, 1, cq, nil)[0]
		} else {
			p = newPair(t, opts)
		}
		if err := p.a.PostRecv([]wr.Recv{{ID: 10}, {ID: 11}}); err != nil {
			t.Fatal(err)
		}
		if err := p.a.PostSend([]wr.Send{p.write(1, 0, 8, true), p.write(2, 8, 8, true)}); err != nil {
			t.Fatal(err)
		}
		p.a.Fail(wr.WCRetryExcErr)
		var wcs []wr.Completion
		if shared {
			wcs = pollShared(t, cq)
		} else {
			wcs = poll(p.a)
		}
		if len(wcs) < 3 || wcs[0].ID != 1 || wcs[0].Status != wr.WCRetryExcErr ||
			wcs[1].ID != 10 || wcs[2].ID != 11 {
			t.Fatalf("shared=%v: completions at once %v, want send 1's WCRetryExcErr, then the receives flushed", shared, wcs)
		}
	}
}

// In Auto mode a message the peer had waiting for a receive at e (RNRRetry)
// fails once e fails, as after Kill, rather than waiting for ever.
func TestFailPumpsThePeer(t *testing.T) {
	p := newPair(t, Options{Auto: true, RNRRetry: true})
	// A write with immediate and no payload, as a credit update is.
	bw := wr.Send{ID: 30, Op: wr.OpWriteImm, Imm: 1, Signaled: true}
	if err := p.b.PostSend([]wr.Send{bw}); err != nil {
		t.Fatal(err)
	}
	if wcs := poll(p.b); len(wcs) != 0 || p.f.Stats().RNRStalls == 0 {
		t.Fatalf("the message did not wait for a receive: %v, %+v", wcs, p.f.Stats())
	}
	p.a.Fail(wr.WCGeneralErr)
	wcs := poll(p.b)
	if len(wcs) != 1 || wcs[0].ID != 30 || wcs[0].Status != wr.WCRetryExcErr {
		t.Fatalf("the peer completed %v, want its waiting send WCRetryExcErr", wcs)
	}
}

// A removed device loses the completions its owner had not polled: the
// receives it had completed never show, and only what was still posted is
// flushed. Its sends' slots are free again.
func TestFailLosingCompletions(t *testing.T) {
	p := newPair(t, Options{Auto: true})
	if err := p.b.PostRecv([]wr.Recv{{ID: 20}, {ID: 21}, {ID: 22}}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostSend([]wr.Send{p.write(1, 0, 8, true), p.write(2, 8, 8, true)}); err != nil {
		t.Fatal(err)
	}
	if lost := p.b.FailLosingCompletions(wr.WCGeneralErr); lost != 2 {
		t.Fatalf("lost %d completions, want the 2 receives", lost)
	}
	wcs := poll(p.b)
	if len(wcs) != 1 || wcs[0].ID != 22 || wcs[0].Status != wr.WCWRFlushErr {
		t.Fatalf("after the removal: %v, want receive 22 flushed alone", wcs)
	}
	// The sender's side: its unpolled send completions are lost too, and
	// the send queue has room for a full depth of posts (all flushed).
	if lost := p.a.FailLosingCompletions(wr.WCGeneralErr); lost != 2 {
		t.Fatalf("the sender lost %d completions, want 2", lost)
	}
	for i := range 8 {
		if err := p.a.PostSend([]wr.Send{p.write(uint64(100+i), 0, 4, true)}); err != nil {
			t.Fatalf("post %d after the removal: %v", i, err)
		}
	}
	if wcs := poll(p.a); len(wcs) != 8 || wcs[0].Status != wr.WCWRFlushErr {
		t.Fatalf("posts after the removal: %v", wcs)
	}
}

// On a shared CQ only the removed device's endpoint loses its completions;
// the others' stay, in order.
func TestFailLosingCompletionsSharedCQ(t *testing.T) {
	f := New(7, Options{Auto: true})
	cqB := f.NewCQ(CQOptions{})
	ps := sharedPairs(f, 2, nil, cqB)
	for i, p := range ps {
		base := uint64(100 * (i + 1))
		if err := p.b.PostRecv([]wr.Recv{{ID: base}, {ID: base + 1}, {ID: base + 2}}); err != nil {
			t.Fatal(err)
		}
		if err := p.a.PostSend([]wr.Send{p.write(1, 0, 8, true), p.write(2, 8, 8, true)}); err != nil {
			t.Fatal(err)
		}
	}
	if lost := ps[0].b.FailLosingCompletions(wr.WCGeneralErr); lost != 2 {
		t.Fatalf("lost %d completions, want 2", lost)
	}
	var ids []uint64
	for _, wc := range pollShared(t, cqB) {
		ids = append(ids, wc.ID)
	}
	if want := []uint64{200, 201, 102}; !slices.Equal(ids, want) {
		t.Fatalf("the shared CQ gave %v, want %v", ids, want)
	}
}

// A cut wire fails nobody at once: each side learns of it when a send of
// its own runs out of retries, and a side that only receives hears nothing.
func TestCutWire(t *testing.T) {
	p := newPair(t, Options{MaxWireDelay: 5, MaxCompletionDelay: 2})
	if err := p.a.PostRecv([]wr.Recv{{ID: 10}}); err != nil {
		t.Fatal(err)
	}
	if err := p.b.PostRecv([]wr.Recv{{ID: 20}, {ID: 21}}); err != nil {
		t.Fatal(err)
	}
	copy(p.aMem.Buf, "cut off")
	if err := p.a.PostSend([]wr.Send{p.write(1, 0, 7, true), p.write(2, 0, 7, true)}); err != nil {
		t.Fatal(err)
	}
	p.a.Cut()
	got := map[uint64]wr.WCStatus{}
	for _, wc := range drain(p, p.a) {
		got[wc.ID] = wc.Status
	}
	want := map[uint64]wr.WCStatus{1: wr.WCRetryExcErr, 2: wr.WCWRFlushErr, 10: wr.WCWRFlushErr}
	if !maps.Equal(got, want) {
		t.Fatalf("the sending side completed %v, want %v", got, want)
	}
	if wcs := drain(p, p.b); len(wcs) != 0 || p.b.QueuedRecvs() != 2 {
		t.Fatalf("the receiving side completed %v, %d receives left; want nothing", wcs, p.b.QueuedRecvs())
	}
	if !bytes.Equal(p.bMem.Buf[:7], make([]byte, 7)) {
		t.Fatalf("bytes crossed a cut wire: %q", p.bMem.Buf[:7])
	}
	// The quiet side learns when it sends, even to a peer already in error.
	if err := p.b.PostSend([]wr.Send{{ID: 30, Op: wr.OpWriteImm, Imm: 1, Signaled: true}}); err != nil {
		t.Fatal(err)
	}
	got = map[uint64]wr.WCStatus{}
	for _, wc := range drain(p, p.b) {
		got[wc.ID] = wc.Status
	}
	want = map[uint64]wr.WCStatus{30: wr.WCRetryExcErr, 20: wr.WCWRFlushErr, 21: wr.WCWRFlushErr}
	if !maps.Equal(got, want) {
		t.Fatalf("the receiving side's send: %v, want %v", got, want)
	}
}

// In Auto mode a cut wire fails what was waiting on it (for a receive,
// with RNRRetry) at once, on both sides.
func TestCutWireAuto(t *testing.T) {
	p := newPair(t, Options{Auto: true, RNRRetry: true})
	if err := p.b.PostSend([]wr.Send{{ID: 30, Op: wr.OpWriteImm, Imm: 1, Signaled: true}}); err != nil {
		t.Fatal(err)
	}
	p.a.Cut()
	if wcs := poll(p.b); len(wcs) != 1 || wcs[0].ID != 30 || wcs[0].Status != wr.WCRetryExcErr {
		t.Fatalf("the waiting send completed %v, want WCRetryExcErr", wcs)
	}
	if wcs := poll(p.a); len(wcs) != 0 {
		t.Fatalf("the other side completed %v", wcs)
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
