package ring_test

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/wr"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
)

// TestSharedRecvWindowGrows: a SharedRecv engine advertises a small
// credit window, says its window may grow, and widens it by doubling up
// to RecvQueueSize while a stream of small messages keeps using it up;
// every byte arrives. A peer that keeps the receives posts only what the
// window needs.
func TestSharedRecvWindowGrows(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{Auto: true})
	w, rd := connect(t, f, ring.Config{}, ring.Config{SharedRecv: true})
	pd := localConnData(t, rd)
	if pd.Credits != ring.FirstSharedCredits || pd.Flags&ring.FlagGrowingCredits == 0 {
		t.Fatalf("private data: %d credits, flags %#x; want %d and FlagGrowingCredits", pd.Credits, pd.Flags, ring.FirstSharedCredits)
	}
	if got := rd.eng.Stats(); got.RecvCompletions != 0 {
		t.Fatal("receives completed before anything was sent")
	}
	// The writer sends 16-byte messages faster than the reader reads.
	st := newStream(3, 256<<10)
	burstStream(t, w, rd, st, 16, 400)
	s := rd.eng.Stats()
	// 32 → 64 → 128 → 256 → 384.
	if s.CreditWindowGrowths != 4 {
		t.Errorf("the window grew %d times, want 4 (32 to 384 by doubling)", s.CreditWindowGrowths)
	}
	if w.eng.Err() != nil || rd.eng.Err() != nil {
		t.Fatalf("errors: writer %v, reader %v", w.eng.Err(), rd.eng.Err())
	}
}

// TestSharedRecvWindowDeclined: a driver that can give no receives for a
// wider window leaves the window as it started; the stream goes on.
func TestSharedRecvWindowDeclined(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{Auto: true})
	w, rd := connect(t, f, ring.Config{}, ring.Config{SharedRecv: true})
	rd.declineCredits = true
	st := newStream(4, 64<<10)
	burstStream(t, w, rd, st, 16, 400)
	if g := rd.eng.Stats().CreditWindowGrowths; g != 0 {
		t.Errorf("the window grew %d times with every receive declined", g)
	}
}

// TestGrowingCreditsNeedTheFlag: a peer whose private data does not say
// its window grows may not grant more credits than it advertised; one that
// says so may, up to half the sequence space.
func TestGrowingCreditsNeedTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   uint8
		credits uint32
		ok      bool
	}{
		{"without the flag", ring.FlagIOMap, 65, false},
		{"with the flag", ring.FlagIOMap | ring.FlagGrowingCredits, 4096, true},
		{"with the flag, going back", ring.FlagIOMap | ring.FlagGrowingCredits, 0x8040, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := newHostileFlags(t, ring.Config{}, tc.flags)
			p.msg(ring.MakeMsg(ring.MsgSGL, tc.credits))
			if tc.ok {
				expectAlive(t, s)
			} else {
				expectFailure(t, s, ring.ErrBadCredits)
			}
		})
	}
}

// expectAlive services s and fails the test if its engine failed.
func expectAlive(t *testing.T, s *side) {
	t.Helper()
	for range 10 {
		if _, err := s.service(1000); err != nil {
			t.Fatalf("engine failed: %v", err)
		}
	}
}

// TestSharedRecvOverrun: on a shared receive queue, messages beyond the
// receives the engine posted and a headroom's worth more are the peer's
// overrun, not an unknown completion.
func TestSharedRecvOverrun(t *testing.T) {
	s, p := newHostile(t, ring.Config{SharedRecv: true})
	// Receives other connections posted on the shared queue.
	others := make([]wr.Recv, 64)
	for i := range others {
		others[i].ID = ring.RecvIDFlag
	}
	if err := s.ep.PostRecv(others); err != nil {
		t.Fatal(err)
	}
	// Keepalives, which take receives but no credit: one more than the
	// engine posted (48) and may borrow (16).
	for range ring.FirstSharedCredits + 2*ring.RecvHeadroom + 1 {
		p.msg(ring.MakeMsg(ring.MsgCtrl, ring.CtrlKeepalive))
	}
	expectFailure(t, s, ring.ErrCreditOverrun)
}

// burstStream moves st from w to rd in bursts: up to burst messages of
// size bytes each, each posted as its own transfer, before the reader
// reads them all.
func burstStream(t *testing.T, w, rd *side, st *stream, size, burst int) {
	t.Helper()
	for idle := 0; st.read < st.total; {
		moved := false
		for range burst {
			if st.written == st.total {
				break
			}
			n, err := w.eng.Write(st.fill(min(size, int(st.total-st.written))))
			if err != nil {
				t.Fatal(err)
			}
			st.written += uint64(n)
			m, err := w.service(len(w.wcs))
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 && !m {
				break // out of credits or ring space
			}
			moved = true
		}
		for range 4 {
			for _, s := range []*side{rd, w} {
				m, err := s.service(len(s.wcs))
				if err != nil {
					t.Fatal(err)
				}
				moved = moved || m
				s.check(t)
			}
		}
		n, err := rd.eng.Read(st.rbuf)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.verify(st.rbuf[:n]); err != nil {
			t.Fatal(err)
		}
		if moved = moved || n > 0; moved {
			idle = 0
		} else if idle++; idle > 1000 {
			t.Fatalf("stuck at %d of %d bytes read", st.read, st.total)
		}
	}
}

// TestSharedRecvBorrowsHeadroom: messages that take up to a headroom's
// worth of receives beyond the ones posted (the driver had not put the
// consumed ones back yet) are no overrun.
func TestSharedRecvBorrowsHeadroom(t *testing.T) {
	s, p := newHostile(t, ring.Config{SharedRecv: true})
	others := make([]wr.Recv, 64)
	for i := range others {
		others[i].ID = ring.RecvIDFlag
	}
	if err := s.ep.PostRecv(others); err != nil {
		t.Fatal(err)
	}
	for range ring.FirstSharedCredits + 2*ring.RecvHeadroom {
		p.msg(ring.MakeMsg(ring.MsgCtrl, ring.CtrlKeepalive))
	}
	expectAlive(t, s)
}
