package ring_test

import (
	"errors"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/wr"
)

// pumpStream writes st.total bytes from w in writes of up to writeSize
// and reads them at rd in reads of up to readSize, checking every byte,
// with both driver loops (which serve regions) in between. If rd must not
// read yet, readSize is 0: the stream then ends once w has written all.
func pumpStream(t *testing.T, w, rd *side, st *stream, writeSize, readSize int) {
	t.Helper()
	for idle := 0; st.read < st.total; {
		moved := false
		if st.written < st.total {
			n, err := w.eng.Write(st.fill(min(writeSize, int(st.total-st.written))))
			if err != nil {
				t.Fatal(err)
			}
			st.written += uint64(n)
			moved = n > 0
		}
		for _, s := range []*side{w, rd} {
			m, err := s.service(len(s.wcs))
			if err != nil {
				t.Fatal(err)
			}
			moved = moved || m
			s.check(t)
		}
		if readSize == 0 {
			if !moved {
				return // the reader's grants are full
			}
		} else {
			n, err := rd.eng.Read(st.rbuf[:readSize])
			if err != nil {
				t.Fatal(err)
			}
			if err := st.verify(st.rbuf[:n]); err != nil {
				t.Fatal(err)
			}
			moved = moved || n > 0
		}
		if moved {
			idle = 0
		} else if idle++; idle > 1000 {
			t.Fatalf("stuck at %d of %d bytes read (%d written); writer %+v; reader %+v",
				st.read, st.total, st.written, w.eng.Stats(), rd.eng.Stats())
		}
	}
}

func newStream(salt, total uint64) *stream {
	return &stream{salt: salt, total: total, wbuf: make([]byte, 1<<20), rbuf: make([]byte, 1<<20)}
}

func localConnData(t *testing.T, s *side) ring.ConnData {
	raw := s.eng.LocalConnData()
	c, err := ring.DecodeConnData(raw[:])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ringSizes(s *side) (int, int) { return s.eng.RingSizes() }

// A bulk stream grows both rings to their maximum; once quiet, the send
// ring shrinks at once and the receive ring at its next grant; every byte
// arrives, and every retired region is deregistered.
func TestRingsGrowAndShrink(t *testing.T) {
	f := simfabric.New(7, simfabric.Options{Auto: true})
	cfg := ring.Config{} // 16 KiB idle, 128 KiB max
	a, b := connect(t, f, cfg, cfg)
	if s, _ := ringSizes(a); s != ring.DefaultIdleBufSize {
		t.Fatalf("send ring starts at %d", s)
	}
	if _, r := ringSizes(b); r != ring.DefaultIdleBufSize {
		t.Fatalf("receive ring starts at %d", r)
	}

	pumpStream(t, a, b, newStream(1, 4<<20), 64<<10, 64<<10)
	if s, _ := ringSizes(a); s != ring.DefaultBufSize {
		t.Fatalf("send ring %d after a bulk stream, want %d", s, ring.DefaultBufSize)
	}
	if _, r := ringSizes(b); r != ring.DefaultBufSize {
		t.Fatalf("receive ring %d after a bulk stream, want %d", r, ring.DefaultBufSize)
	}
	as, bs := a.eng.Stats(), b.eng.Stats()
	if as.SendRingGrowths == 0 || bs.RecvRingGrowths == 0 {
		t.Fatalf("growths: send %d receive %d", as.SendRingGrowths, bs.RecvRingGrowths)
	}
	for _, s := range []*side{a, b} {
		if n := s.ep.Regions(); n != 3 {
			t.Fatalf("%s: %d regions registered, want 3 (send, receive, target)", s.name, n)
		}
	}

	// Two ticks with nothing moving in between: the second finds it quiet.
	for i := 0; i < 2; i++ {
		a.eng.Quiet()
		b.eng.Quiet()
		settle(t, a, b)
	}
	if s, _ := ringSizes(a); s != ring.DefaultIdleBufSize {
		t.Fatalf("send ring %d after a quiet spell, want %d", s, ring.DefaultIdleBufSize)
	}
	if a.eng.Stats().SendRingShrinks != 1 {
		t.Fatalf("send shrinks: %d", a.eng.Stats().SendRingShrinks)
	}
	// The peer still holds both halves of the large ring: the receive ring
	// moves only once they are filled.
	if _, r := ringSizes(b); r != ring.DefaultBufSize {
		t.Fatalf("receive ring %d moved before the peer used its grants", r)
	}
	pumpStream(t, a, b, newStream(2, 512<<10), 1000, 1000)
	if n := b.eng.Stats().RecvRingShrinks; n != 1 {
		t.Fatalf("receive shrinks: %d", n)
	}
	for _, s := range []*side{a, b} {
		if n := s.ep.Regions(); n != 3 {
			t.Fatalf("%s: %d regions registered, want 3", s.name, n)
		}
	}
}

// A retired receive region stays registered while bytes granted from it
// are unread, and is deregistered once they are read.
func TestRetiredRecvRegionReleasedAfterRead(t *testing.T) {
	f := simfabric.New(8, simfabric.Options{Auto: true})
	a, b := connect(t, f, ring.Config{}, ring.Config{})
	first := localConnData(t, b)
	firstAddr := first.DataBuf.Addr

	// b does not read: a fills what it was granted.
	st := newStream(3, 256<<10)
	pumpStream(t, a, b, st, 64<<10, 0)
	if _, r := ringSizes(b); r == ring.DefaultIdleBufSize {
		t.Fatalf("the receive ring did not move: %+v", b.eng.Stats())
	}
	if b.eng.Stats().RecvRingGrowths == 0 {
		t.Fatalf("no growth: %+v", b.eng.Stats())
	}
	if !b.ep.HasRegion(firstAddr) {
		t.Fatal("the first receive region was deregistered with its bytes unread")
	}
	if b.eng.ReadableBytes() == 0 {
		t.Fatal("nothing to read")
	}
	pumpStream(t, a, b, st, 64<<10, 3000)
	if b.ep.HasRegion(firstAddr) {
		t.Fatal("the first receive region is still registered after every byte was read")
	}
}

// A driver that cannot register memory keeps the rings as they are, and
// is asked again only after a quiet tick, not on every message.
func TestRegionDeclinedKeepsRings(t *testing.T) {
	f := simfabric.New(9, simfabric.Options{Auto: true})
	a, b := connect(t, f, ring.Config{}, ring.Config{})
	a.declineRegions, b.declineRegions = true, true
	pumpStream(t, a, b, newStream(4, 2<<20), 64<<10, 64<<10)
	if s, _ := ringSizes(a); s != ring.DefaultIdleBufSize {
		t.Fatalf("send ring %d", s)
	}
	if _, r := ringSizes(b); r != ring.DefaultIdleBufSize {
		t.Fatalf("receive ring %d", r)
	}
	if n := a.eng.Stats().RegionsDeclined; n != 1 {
		t.Fatalf("sender declined %d times, want 1", n)
	}
	if n := b.eng.Stats().RegionsDeclined; n != 1 {
		t.Fatalf("receiver declined %d times, want 1", n)
	}
	a.eng.Quiet()
	b.eng.Quiet()
	a.declineRegions, b.declineRegions = false, false
	pumpStream(t, a, b, newStream(5, 2<<20), 64<<10, 64<<10)
	if s, _ := ringSizes(a); s != ring.DefaultBufSize {
		t.Fatalf("send ring %d after the limit lifted", s)
	}
}

// A hostile peer that writes into a receive region after it was retired
// and deregistered gets a remote access error; the connection ends with
// an error, and nothing of the write is read.
func TestHostileWriteIntoRetiredRegion(t *testing.T) {
	f := simfabric.New(10, simfabric.Options{Auto: true})
	a, b := connect(t, f, ring.Config{}, ring.Config{})
	first := localConnData(t, b)
	pumpStream(t, a, b, newStream(6, 1<<20), 64<<10, 64<<10)
	if b.ep.HasRegion(first.DataBuf.Addr) {
		t.Fatal("first receive region still registered")
	}
	readBefore := b.eng.Stats().BytesRead
	// a's own queue pair posts the rogue write, as a hostile peer would.
	src := a.ep.Register(make([]byte, 16), false)
	bad := []wr.Send{{ID: 1 << 40, Op: wr.OpWriteImm, Imm: uint32(ring.MakeMsg(ring.MsgData, 16)),
		Signaled: true, NumSGE: 1,
		SGE:        [2]wr.SGE{{Addr: src.Addr, Length: 16, LKey: src.LKey}},
		RemoteAddr: first.DataBuf.Addr, RKey: first.DataBuf.Key}}
	if err := a.ep.PostSend(bad); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100 && b.eng.Err() == nil; i++ {
		b.service(len(b.wcs))
	}
	if b.eng.Err() == nil {
		t.Fatal("the receiver carried on after a write into a retired region")
	}
	var ce *ring.CompletionError
	if !errors.As(b.eng.Err(), &ce) {
		t.Fatalf("receiver error %v, want a completion error", b.eng.Err())
	}
	if b.eng.Stats().BytesRead != readBefore || b.eng.ReadableBytes() != 0 {
		t.Fatal("bytes of the rogue write became readable")
	}
}
