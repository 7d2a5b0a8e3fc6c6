package ring_test

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
)

// TestPeerMayLackReceives: against a peer that does not poll, our sends
// would run out of an rsocket peer's receives (it posts exactly RecvQueueSize)
// when the DATA credits it granted are used up and a message it does not
// credit (here our first SGL update) came on top; PeerMayLackReceives says
// so from then on, and stops once the peer polls and grants again. (This
// peer is an rnet engine, which posts RecvHeadroom more, so the fabric
// sees no RNR here.)
func TestPeerMayLackReceives(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{Auto: true, RNRRetry: true})
	a, b := connect(t, f, ring.Config{}, ring.Config{RecvQueueSize: 16})
	credits := a.eng.Credits()
	if credits != 16 {
		t.Fatalf("peer granted %d credits, want its RecvQueueSize 16", credits)
	}
	for i := range credits {
		if _, err := a.eng.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.service(64); err != nil {
			t.Fatal(err)
		}
		// Before the last credit goes, every message sent had a receive.
		if got, want := a.eng.PeerMayLackReceives(), i == credits-1; got != want {
			t.Fatalf("after DATA %d (credits left %d): PeerMayLackReceives = %v, want %v (fabric %+v)",
				i+1, a.eng.Credits(), got, want, f.Stats())
		}
	}
	// The peer polls: it takes everything, reposts and grants again.
	got := make([]byte, 0, credits)
	buf := make([]byte, 64)
	for range 100 {
		if _, err := b.service(64); err != nil {
			t.Fatal(err)
		}
		n, _ := b.eng.Read(buf)
		got = append(got, buf[:n]...)
		if _, err := a.service(64); err != nil {
			t.Fatal(err)
		}
		if len(got) == credits && !a.eng.PeerMayLackReceives() && a.eng.InFlight() == 0 {
			break
		}
	}
	if len(got) != credits || a.eng.PeerMayLackReceives() {
		t.Fatalf("after the peer polled: read %d of %d bytes, PeerMayLackReceives %v, %d in flight",
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
