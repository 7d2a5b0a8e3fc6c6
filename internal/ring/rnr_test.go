package ring_test

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
)

// TestPeerMayLackReceives: our sends may find the peer without a receive
// once the messages its credits do not count, sent since its last grant,
// outnumber the credits left and the receives it said it keeps beyond them:
// none for a C rsocket peer, which posts exactly RecvQueueSize,
// FlaggedRecvHeadroom for an rnet peer (FlagRecvHeadroom). The peer here
// reads nothing, so it grants nothing new: we use its credits up, then send
// it credit updates for what it sends us. Then it reads and grants again,
// and PeerMayLackReceives says false. (The peer is an rnet engine either
// way, which reposts as it polls, so the fabric sees no RNR here.)
func TestPeerMayLackReceives(t *testing.T) {
	for _, tc := range []struct {
		name     string
		peerSays bool // the peer's private data has FlagRecvHeadroom
		headroom int  // the uncredited messages beyond the credits that find receives
	}{
		{"C rsocket peer", false, 0},
		{"rnet peer", true, ring.FlaggedRecvHeadroom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testPeerMayLackReceives(t, tc.peerSays, tc.headroom)
		})
	}
}

func testPeerMayLackReceives(t *testing.T, peerSays bool, headroom int) {
	f := simfabric.New(1, simfabric.Options{Auto: true, RNRRetry: true})
	a, b := connectPeerFlags(t, f, ring.Config{RecvQueueSize: 16}, ring.Config{RecvQueueSize: 16}, peerSays)
	credits := a.eng.Credits()
	if credits != 16 {
		t.Fatalf("peer granted %d credits, want its RecvQueueSize 16", credits)
	}
	// Our DATA messages use the peer's credits; our first SGL update came
	// first, uncredited.
	for i := range credits {
		if _, err := a.eng.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.service(64); err != nil {
			t.Fatal(err)
		}
		// Before the last credit goes, every message sent had a receive.
		if got, want := a.eng.PeerMayLackReceives(), i == credits-1 && headroom == 0; got != want {
			t.Fatalf("after DATA %d (credits left %d): PeerMayLackReceives = %v, want %v (fabric %+v)",
				i+1, a.eng.Credits(), got, want, f.Stats())
		}
	}
	if a.eng.Stats().CreditUpdatesSent != 1 {
		t.Fatalf("%d credit updates sent, want the first SGL update alone", a.eng.Stats().CreditUpdatesSent)
	}

	// The peer polls but reads nothing: it takes our messages in and
	// sends its first SGL update, whose grant takes us nowhere new.
	if _, err := b.service(64); err != nil {
		t.Fatal(err)
	}
	if _, err := a.service(64); err != nil {
		t.Fatal(err)
	}
	if a.eng.Stats().CreditUpdatesReceived != 1 || a.eng.Credits() != 0 {
		t.Fatalf("%d grants received, %d credits left; want the peer's first and none",
			a.eng.Stats().CreditUpdatesReceived, a.eng.Credits())
	}
	if a.eng.PeerMayLackReceives() {
		t.Fatal("PeerMayLackReceives right after a grant")
	}

	// The peer sends; we read and grant, in credit updates that its
	// credits do not count, while it grants us nothing.
	buf := make([]byte, 64)
	sentBefore := a.eng.Stats().CreditUpdatesSent
	for round := 0; ; round++ {
		if round > 100*(headroom+2) {
			t.Fatalf("after %d rounds we sent %d credit updates; want %d", round,
				a.eng.Stats().CreditUpdatesSent-sentBefore, headroom+2)
		}
		if _, err := b.eng.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.service(64); err != nil {
			t.Fatal(err)
		}
		if _, err := a.service(64); err != nil {
			t.Fatal(err)
		}
		a.eng.Read(buf)
		if _, err := a.service(64); err != nil {
			t.Fatal(err)
		}
		if got := a.eng.Stats().CreditUpdatesReceived; got != 1 {
			t.Fatalf("the peer granted again (%d grants) without reading", got)
		}
		updates := int(a.eng.Stats().CreditUpdatesSent - sentBefore)
		if got, want := a.eng.PeerMayLackReceives(), updates > headroom; got != want {
			t.Fatalf("after %d credit updates with no credit left: PeerMayLackReceives = %v, want %v",
				updates, got, want)
		}
		if updates == headroom+2 {
			break
		}
	}

	// The peer reads: it grants again, and from then on has receives
	// for everything we sent.
	got := make([]byte, 0, credits)
	for range 100 {
		if _, err := b.service(64); err != nil {
			t.Fatal(err)
		}
		n, _ := b.eng.Read(buf)
		got = append(got, buf[:n]...)
		if _, err := a.service(64); err != nil {
			t.Fatal(err)
		}
		a.eng.Read(buf)
		if len(got) == credits && !a.eng.PeerMayLackReceives() && a.eng.InFlight() == 0 {
			break
		}
	}
	if len(got) != credits || a.eng.PeerMayLackReceives() {
		t.Fatalf("after the peer read: read %d of %d bytes, PeerMayLackReceives %v, %d in flight",
			len(got), credits, a.eng.PeerMayLackReceives(), a.eng.InFlight())
	}
	for i, c := range got {
		if c != byte(i) {
			t.Fatalf("byte %d = %d", i, c)
		}
	}
	a.check(t)
	b.check(t)
}

// connectPeerFlags is connect, but a learns of b's receive headroom only
// if peerSays: without FlagRecvHeadroom, b's private data is a C rsocket
// peer's in what a may assume.
func connectPeerFlags(t testing.TB, f *simfabric.Fabric, ca, cb ring.Config, peerSays bool) (*side, *side) {
	t.Helper()
	ea, eb := f.Pair(capsFor(ca), capsFor(cb))
	a, b := newSide(t, "a", ea, ca), newSide(t, "b", eb, cb)
	pa, pb := a.eng.LocalConnData(), b.eng.LocalConnData()
	cd, err := ring.DecodeConnData(pb[:])
	if err != nil {
		t.Fatal(err)
	}
	if cd.Flags&ring.FlagRecvHeadroom == 0 {
		t.Fatalf("an rnet engine's private data lacks FlagRecvHeadroom: flags %#x", cd.Flags)
	}
	if !peerSays {
		cd.Flags &^= ring.FlagRecvHeadroom
		pb = cd.Encode()
	}
	if err := b.eng.Establish(pa[:]); err != nil {
		t.Fatal(err)
	}
	if err := a.eng.Establish(pb[:]); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestLocalConnDataSaysRecvHeadroom: every rnet engine, on a receive queue
// of its own or a shared one, on RoCE or iWARP, keeps FlaggedRecvHeadroom
// receives beyond its credits and says so in its private data.
func TestLocalConnDataSaysRecvHeadroom(t *testing.T) {
	for _, cfg := range []ring.Config{{}, {SharedRecv: true}, {IWARP: true}} {
		f := simfabric.New(1, simfabric.Options{})
		ep, _ := f.Pair(capsFor(cfg), capsFor(cfg))
		s := newSide(t, "a", ep, cfg)
		pd := s.eng.LocalConnData()
		cd, err := ring.DecodeConnData(pd[:])
		if err != nil {
			t.Fatal(err)
		}
		if cd.Flags&ring.FlagRecvHeadroom == 0 {
			t.Errorf("%+v: flags %#x lack FlagRecvHeadroom", cfg, cd.Flags)
		}
		if posted := len(s.recvs); posted < int(cd.Credits)+ring.FlaggedRecvHeadroom {
			t.Errorf("%+v: %d receives posted for %d credits, want %d beyond them", cfg, posted, cd.Credits, ring.FlaggedRecvHeadroom)
		}
	}
}
