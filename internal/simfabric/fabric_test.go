package simfabric

import (
	"errors"
	"sync"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

type pair struct {
	f          *Fabric
	a, b       *Endpoint
	aMem, bMem ring.Region
}

func newPair(t *testing.T, opts Options) *pair {
	t.Helper()
	f := New(7, opts)
	a, b := f.Pair(Caps{SendDepth: 8, RecvDepth: 8, MaxInline: 64}, Caps{SendDepth: 8, RecvDepth: 8, MaxInline: 64})
	return &pair{f: f, a: a, b: b,
		aMem: a.Register(make([]byte, 4096), false),
		bMem: b.Register(make([]byte, 4096), true)}
}

func (p *pair) write(id uint64, off, n int, imm bool) wr.Send {
	w := wr.Send{ID: id, Op: wr.OpWrite, Signaled: true, NumSGE: 1,
		SGE:        [2]wr.SGE{{Addr: p.aMem.Addr + uint64(off), Length: uint32(n), LKey: p.aMem.LKey}},
		RemoteAddr: p.bMem.Addr + uint64(off), RKey: p.bMem.RKey}
	if imm {
		w.Op, w.Imm = wr.OpWriteImm, uint32(id)
	}
	return w
}

func poll(e *Endpoint) []wr.Completion {
	out := make([]wr.Completion, 64)
	return out[:e.PollCQ(out)]
}

func TestWriteLandsInOrderWithCompletions(t *testing.T) {
	p := newPair(t, Options{MaxWireDelay: 3, MaxCompletionDelay: 3})
	if err := p.b.PostRecv([]wr.Recv{{ID: 100}, {ID: 101}}); err != nil {
		t.Fatal(err)
	}
	copy(p.aMem.Buf, "hello, world")
	if err := p.a.PostSend([]wr.Send{p.write(1, 0, 5, true), p.write(2, 5, 7, false), p.write(3, 7, 5, true)}); err != nil {
		t.Fatal(err)
	}
	copy(p.aMem.Buf, "XXXXXXXXXXXX") // payloads were taken at post time
	var sends, recvs []wr.Completion
	for i := 0; i < 20; i++ {
		p.f.Step()
		sends = append(sends, poll(p.a)...)
		recvs = append(recvs, poll(p.b)...)
	}
	if p.f.Pending() {
		t.Fatal("still pending")
	}
	if len(sends) != 3 || sends[0].ID != 1 || sends[1].ID != 2 || sends[2].ID != 3 {
		t.Fatalf("send completions %+v", sends)
	}
	if len(recvs) != 2 || recvs[0].ID != 100 || recvs[0].Imm != 1 || recvs[0].ByteLen != 5 ||
		recvs[0].Opcode != wr.WCRecvRDMAWithImm || recvs[1].ID != 101 || recvs[1].Imm != 3 {
		t.Fatalf("receive completions %+v", recvs)
	}
	if got := string(p.bMem.Buf[:12]); got != "hello, world" {
		t.Fatalf("memory %q", got)
	}
}

func TestRNRIsAnError(t *testing.T) {
	p := newPair(t, Options{Auto: true})
	if err := p.a.PostSend([]wr.Send{p.write(1, 0, 4, true), p.write(2, 0, 4, false)}); err != nil {
		t.Fatal(err)
	}
	wcs := poll(p.a)
	if len(wcs) != 2 || wcs[0].Status != wr.WCRNRRetryExcErr || wcs[1].Status != wr.WCWRFlushErr {
		t.Fatalf("%+v", wcs)
	}
	if st := p.f.Stats(); st.RNR != 1 {
		t.Fatalf("%+v", st)
	}
	if p.a.Stats().RNR != 1 {
		t.Fatal("endpoint RNR not counted")
	}
	// The queue pair is in error: later work is flushed.
	if err := p.a.PostSend([]wr.Send{p.write(3, 0, 4, false)}); err != nil {
		t.Fatal(err)
	}
	if wcs := poll(p.a); len(wcs) != 1 || wcs[0].Status != wr.WCWRFlushErr {
		t.Fatalf("%+v", wcs)
	}
}

func TestRNRRetryWaits(t *testing.T) {
	p := newPair(t, Options{Auto: true, RNRRetry: true})
	if err := p.a.PostSend([]wr.Send{p.write(1, 0, 4, true)}); err != nil {
		t.Fatal(err)
	}
	if wcs := poll(p.a); len(wcs) != 0 {
		t.Fatalf("completed without a receive: %+v", wcs)
	}
	if err := p.b.PostRecv([]wr.Recv{{ID: 9}}); err != nil {
		t.Fatal(err)
	}
	if wcs := poll(p.a); len(wcs) != 1 || wcs[0].Status != wr.WCSuccess {
		t.Fatalf("%+v", wcs)
	}
	if wcs := poll(p.b); len(wcs) != 1 || wcs[0].ID != 9 {
		t.Fatalf("%+v", wcs)
	}
	if st := p.f.Stats(); st.RNR != 0 || st.RNRStalls == 0 {
		t.Fatalf("%+v", st)
	}
}

func TestRemoteAccessChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*wr.Send)
	}{
		{"bad rkey", func(w *wr.Send) { w.RKey++ }},
		{"past the end", func(w *wr.Send) { w.RemoteAddr += 4093 }},
		{"before the start", func(w *wr.Send) { w.RemoteAddr -= 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, Options{Auto: true})
			w := p.write(1, 0, 4, false)
			tc.mod(&w)
			if err := p.a.PostSend([]wr.Send{w}); err != nil {
				t.Fatal(err)
			}
			if wcs := poll(p.a); len(wcs) != 1 || wcs[0].Status != wr.WCRemAccessErr {
				t.Fatalf("%+v", wcs)
			}
		})
	}
	// A region registered without remote write cannot be written.
	p := newPair(t, Options{Auto: true})
	ro := p.b.Register(make([]byte, 64), false)
	w := p.write(1, 0, 4, false)
	w.RemoteAddr, w.RKey = ro.Addr, ro.RKey
	if err := p.a.PostSend([]wr.Send{w}); err != nil {
		t.Fatal(err)
	}
	if wcs := poll(p.a); len(wcs) != 1 || wcs[0].Status != wr.WCRemAccessErr {
		t.Fatalf("%+v", wcs)
	}
}

func TestPostValidation(t *testing.T) {
	p := newPair(t, Options{})
	bad := p.write(1, 0, 4, false)
	bad.SGE[0].LKey++
	if err := p.a.PostSend([]wr.Send{bad}); !errors.Is(err, ErrInvalidWR) {
		t.Fatal(err)
	}
	big := p.write(1, 0, 100, false)
	big.Inline = true
	if err := p.a.PostSend([]wr.Send{big}); !errors.Is(err, ErrInvalidWR) {
		t.Fatal(err)
	}
	var wrs []wr.Send
	for i := 0; i < 9; i++ {
		wrs = append(wrs, p.write(uint64(i), 0, 1, false))
	}
	if err := p.a.PostSend(wrs); !errors.Is(err, ErrQueueFull) {
		t.Fatal(err)
	}
}

func TestSendIntoReceiveBuffer(t *testing.T) {
	p := newPair(t, Options{Auto: true})
	slot := p.b.Register(make([]byte, 4), false)
	if err := p.b.PostRecv([]wr.Recv{{ID: 5, NumSGE: 1, SGE: wr.SGE{Addr: slot.Addr, Length: 4, LKey: slot.LKey}}}); err != nil {
		t.Fatal(err)
	}
	copy(p.aMem.Buf, []byte{1, 2, 3, 4, 5})
	send := wr.Send{ID: 1, Op: wr.OpSend, Inline: true, Signaled: true, NumSGE: 1,
		SGE: [2]wr.SGE{{Addr: p.aMem.Addr, Length: 4}}}
	if err := p.a.PostSend([]wr.Send{send}); err != nil {
		t.Fatal(err)
	}
	if wcs := poll(p.b); len(wcs) != 1 || wcs[0].Opcode != wr.WCRecv || wcs[0].ByteLen != 4 {
		t.Fatalf("%+v", wcs)
	}
	if string(slot.Buf) != "\x01\x02\x03\x04" {
		t.Fatalf("%x", slot.Buf)
	}
	// Five bytes do not fit a 4-byte receive.
	if err := p.b.PostRecv([]wr.Recv{{ID: 6, NumSGE: 1, SGE: wr.SGE{Addr: slot.Addr, Length: 4, LKey: slot.LKey}}}); err != nil {
		t.Fatal(err)
	}
	send.SGE[0].Length = 5
	if err := p.a.PostSend([]wr.Send{send}); err != nil {
		t.Fatal(err)
	}
	if wcs := poll(p.b); len(wcs) != 1 || wcs[0].Status != wr.WCLocLenErr {
		t.Fatalf("%+v", wcs)
	}
	if wcs := poll(p.a); len(wcs) != 2 || wcs[1].Status != wr.WCRemInvReqErr {
		t.Fatalf("%+v", wcs)
	}
}

func TestKill(t *testing.T) {
	p := newPair(t, Options{})
	if err := p.b.PostRecv([]wr.Recv{{ID: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostSend([]wr.Send{p.write(1, 0, 4, true), p.write(2, 0, 4, false)}); err != nil {
		t.Fatal(err)
	}
	p.f.Kill(p.b)
	for p.f.Pending() {
		p.f.Step()
	}
	wcs := poll(p.a)
	if len(wcs) != 2 || wcs[0].Status != wr.WCRetryExcErr || wcs[1].Status != wr.WCWRFlushErr {
		t.Fatalf("%+v", wcs)
	}
	if err := p.b.PostSend(nil); !errors.Is(err, ErrDead) {
		t.Fatal(err)
	}
	if n := p.b.PollCQ(make([]wr.Completion, 4)); n != 0 {
		t.Fatal("a dead endpoint completes work")
	}
}

func TestInjectErrorAndDisconnect(t *testing.T) {
	p := newPair(t, Options{Auto: true})
	if err := p.b.PostRecv([]wr.Recv{{ID: 1}, {ID: 2}}); err != nil {
		t.Fatal(err)
	}
	p.a.InjectError(wr.WCGeneralErr)
	if err := p.a.PostSend([]wr.Send{p.write(1, 0, 4, false)}); err != nil {
		t.Fatal(err)
	}
	if wcs := poll(p.a); len(wcs) != 1 || wcs[0].Status != wr.WCGeneralErr {
		t.Fatalf("%+v", wcs)
	}
	p.a.Disconnect()
	wcs := poll(p.b)
	if len(wcs) != 2 || wcs[0].Status != wr.WCWRFlushErr || wcs[1].ID != 2 {
		t.Fatalf("%+v", wcs)
	}
}

// TestDisconnectLocal: only the side that disconnects is flushed; what its
// peer sends afterwards finds nobody and fails with a retry error.
func TestDisconnectLocal(t *testing.T) {
	p := newPair(t, Options{Auto: true})
	if err := p.a.PostRecv([]wr.Recv{{ID: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := p.b.PostRecv([]wr.Recv{{ID: 2}}); err != nil {
		t.Fatal(err)
	}
	p.a.DisconnectLocal()
	if wcs := poll(p.a); len(wcs) != 1 || wcs[0].ID != 1 || wcs[0].Status != wr.WCWRFlushErr {
		t.Fatalf("disconnected side: %+v", wcs)
	}
	if wcs := poll(p.b); len(wcs) != 0 {
		t.Fatalf("the peer was flushed: %+v", wcs)
	}
	if p.b.QueuedRecvs() != 1 {
		t.Fatal("the peer's receive is gone")
	}
	w := wr.Send{ID: 9, Op: wr.OpWriteImm, Signaled: true}
	if err := p.b.PostSend([]wr.Send{w}); err != nil {
		t.Fatal(err)
	}
	// The failed send takes the peer's queue pair to the error state too.
	if wcs := poll(p.b); len(wcs) != 2 || wcs[0].ID != 9 || wcs[0].Status != wr.WCRetryExcErr || wcs[1].Status != wr.WCWRFlushErr {
		t.Fatalf("the peer's send: %+v", wcs)
	}
}

// TestAutoConcurrent drives both endpoints from goroutines that block on
// Notify, as the rnet driver will, and counts every completion.
func TestAutoConcurrent(t *testing.T) {
	// The sender does not know when receives are re-posted: let messages
	// wait for them, as hardware with rnr_retry_count=7 does.
	p := newPair(t, Options{Auto: true, RNRRetry: true})
	const n = 2000
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // receiver: keep 8 receives posted, count completions
		defer wg.Done()
		if err := p.b.PostRecv(make([]wr.Recv, 8)); err != nil {
			t.Error(err)
			return
		}
		got := 0
		out := make([]wr.Completion, 16)
		for got < n {
			<-p.b.Notify()
			for k := p.b.PollCQ(out); k > 0; k = p.b.PollCQ(out) {
				for _, wc := range out[:k] {
					if wc.Status != wr.WCSuccess || wc.Imm != uint32(got) {
						t.Errorf("completion %d: %+v", got, wc)
						return
					}
					got++
				}
				if err := p.b.PostRecv(make([]wr.Recv, k)); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	go func() { // sender: at most 8 in flight
		defer wg.Done()
		out := make([]wr.Completion, 16)
		sent, done := 0, 0
		for done < n {
			for sent < n && sent-done < 8 {
				w := p.write(uint64(sent), 0, 8, true)
				w.Imm = uint32(sent)
				if err := p.a.PostSend([]wr.Send{w}); err != nil {
					t.Error(err)
					return
				}
				sent++
			}
			if k := p.a.PollCQ(out); k > 0 {
				done += k
				continue
			}
			<-p.a.Notify()
		}
	}()
	wg.Wait()
	if st := p.f.Stats(); st.RNR != 0 || st.Delivered != n || st.Errors != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestDirectLanding checks both halves of Options.DirectLanding: a request
// with nothing ahead of it is in the peer's memory as PostSend returns, and
// one that has to wait for a receive keeps the bytes it had when posted and
// lands, in order, when the peer polls.
func TestDirectLanding(t *testing.T) {
	p := newPair(t, Options{Auto: true, RNRRetry: true, DirectLanding: true})
	if err := p.b.PostRecv([]wr.Recv{{ID: 100}}); err != nil {
		t.Fatal(err)
	}
	copy(p.aMem.Buf, "direct")
	if err := p.a.PostSend([]wr.Send{p.write(1, 0, 6, true)}); err != nil {
		t.Fatal(err)
	}
	if got := string(p.bMem.Buf[:6]); got != "direct" {
		t.Fatalf("peer memory after post: %q, want the bytes already landed", got)
	}

	// No receive is posted now: the second write waits, and so must the
	// third, which needs no receive but must not overtake it.
	copy(p.aMem.Buf[8:], "waits")
	copy(p.aMem.Buf[16:], "after")
	if err := p.a.PostSend([]wr.Send{p.write(2, 8, 5, true), p.write(3, 16, 5, false)}); err != nil {
		t.Fatal(err)
	}
	copy(p.aMem.Buf[8:], "XXXXXXXXXXXXX") // taken at post time
	if got := string(p.bMem.Buf[8:21]); got != "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" {
		t.Fatalf("waiting writes landed early: %q", got)
	}
	if err := p.b.PostRecv([]wr.Recv{{ID: 101}}); err != nil {
		t.Fatal(err)
	}
	recvs := poll(p.b)
	if len(recvs) != 2 || recvs[0].ID != 100 || recvs[1].ID != 101 || recvs[1].Imm != 2 {
		t.Fatalf("receive completions %+v", recvs)
	}
	if got := string(p.bMem.Buf[8:13]) + string(p.bMem.Buf[16:21]); got != "waitsafter" {
		t.Fatalf("peer memory %q", got)
	}
	if sends := poll(p.a); len(sends) != 3 {
		t.Fatalf("send completions %+v", sends)
	}
}
