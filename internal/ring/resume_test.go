package ring_test

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/wr"
)

// A writer held back by a full sbuf, whose transfers have all completed by
// the time it may write again, resumes with full transfers: only the bytes
// written after an idle spell start with a StartTransfer cut. With 128 KiB
// rings (two 64 KiB target entries) and aligned writes, 1 MiB goes out as
// 2 KiB + 62 KiB, then one transfer per entry. Cutting whenever nothing was
// in flight, as before, restarted small after each stall: 31 transfers.
func TestStalledStreamResumesWithFullTransfers(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{})
	cfg := ring.Config{SendBufferSize: 128 << 10, RecvBufferSize: 128 << 10, IdleBufferSize: ring.MaxBufSize}
	w, rd := connect(t, f, cfg, cfg)
	st := &stream{salt: 3, total: 1 << 20}
	st.wbuf = make([]byte, 1<<16)
	st.rbuf = make([]byte, 1<<16)
	var sizes []uint32
	stalls := uint64(0)
	for rounds := 0; st.read < st.total; rounds++ {
		if rounds > 10000 {
			t.Fatalf("stuck: %d of %d bytes read, transfers %v", st.read, st.total, sizes)
		}
		// Fill sbuf: more than the peer has room for, so the stream
		// stalls on buffer space.
		for st.written < st.total {
			n, err := w.eng.Write(st.fill(min(len(st.wbuf), int(st.total-st.written))))
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			st.written += uint64(n)
		}
		// The writer's driver round, watching what it posts.
		n := w.ep.PollCQ(w.wcs)
		if err := w.eng.Complete(w.wcs[:n]); err != nil {
			t.Fatal(err)
		}
		w.recvs = w.eng.PostRecvs(w.recvs[:0])
		if err := w.ep.PostRecv(w.recvs); err != nil {
			t.Fatal(err)
		}
		w.sends = w.eng.PostSends(w.sends[:0])
		for _, w := range w.sends {
			if m := ring.Msg(w.Imm); w.Op == wr.OpWriteImm && m.Op() == ring.MsgData {
				sizes = append(sizes, w.Len())
			}
		}
		if err := w.ep.PostSend(w.sends); err != nil {
			t.Fatal(err)
		}
		if _, err := rd.service(len(rd.wcs)); err != nil {
			t.Fatal(err)
		}
		for {
			n, err := rd.eng.Read(st.rbuf)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if err := st.verify(st.rbuf[:n]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := rd.service(len(rd.wcs)); err != nil {
			t.Fatal(err)
		}
		for f.Pending() {
			f.Step()
		}
		stalls = w.eng.Stats().BufferStalls
	}
	if stalls == 0 {
		t.Fatal("the stream never stalled on buffer space: the test proves nothing")
	}
	want := []uint32{ring.StartTransfer, 64<<10 - ring.StartTransfer}
	for range 15 {
		want = append(want, 64<<10)
	}
	if len(sizes) != len(want) {
		t.Fatalf("%d transfers after %d buffer stalls, want %d: %v", len(sizes), stalls, len(want), sizes)
	}
	for i := range want {
		if sizes[i] != want[i] {
			t.Fatalf("transfer %d is %d bytes, want %d: %v", i, sizes[i], want[i], sizes)
		}
	}
}

// Only a Write at a turn of the conversation starts with a StartTransfer
// cut: the first one, and one after a Read returned bytes. The Writes of a
// one-way stream go out whole, even when everything before them was
// acknowledged already (as over Soft-RoCE, where a post completes before
// it returns).
func TestStartTransferOnlyAtATurn(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{})
	cfg := ring.Config{SendBufferSize: 128 << 10, RecvBufferSize: 128 << 10}
	a, b := connect(t, f, cfg, cfg)
	buf := make([]byte, 8<<10)
	// settle runs both sides until the fabric is quiet, and returns the
	// sizes of a's data transfers.
	settle := func() (sizes []uint32) {
		for range 100 {
			for _, s := range []*side{a, b} {
				if _, err := s.service(len(s.wcs)); err != nil {
					t.Fatal(err)
				}
				if s == a {
					for _, w := range a.sends {
						if m := ring.Msg(w.Imm); w.Op == wr.OpWriteImm && m.Op() == ring.MsgData {
							sizes = append(sizes, w.Len())
						}
					}
				}
			}
			if !f.Pending() {
				return sizes
			}
			for f.Pending() {
				f.Step()
			}
		}
		t.Fatal("the fabric never went quiet")
		return nil
	}
	drain := func(s *side) (n int) {
		for {
			k, err := s.eng.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			if k == 0 {
				return n
			}
			n += k
		}
	}
	write := func(what string, want ...uint32) {
		t.Helper()
		if n, err := a.eng.Write(buf); n != len(buf) || err != nil {
			t.Fatal(n, err)
		}
		sizes := settle()
		if len(sizes) != len(want) || sizes[0] != want[0] || len(want) > 1 && sizes[1] != want[1] {
			t.Fatalf("%s: transfers %v, want %v", what, sizes, want)
		}
		if n := drain(b); n != len(buf) {
			t.Fatalf("%s: b read %d bytes, want %d", what, n, len(buf))
		}
		settle()
	}
	cut := []uint32{ring.StartTransfer, 8<<10 - ring.StartTransfer}
	write("first Write", cut...)
	write("Write after an acknowledged one, no Read between", 8<<10)
	if n, err := b.eng.Write([]byte("reply")); n != 5 || err != nil {
		t.Fatal(n, err)
	}
	settle()
	if n := drain(a); n != 5 {
		t.Fatalf("a read %d bytes of the reply, want 5", n)
	}
	write("Write after a Read", cut...)
}
