package ring_test

import (
	"errors"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
)

// A peer whose first DATA message on a resumed queue pair is not the
// 16-byte exchange (here, stream bytes at once) breaks the protocol: the
// resume fails with a protocol error, and nothing of it reaches the
// reader.
func TestResumedQueuePairRefusesStreamBytesFirst(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{})
	cfg := ring.Config{RetainUntilReceived: true}
	ea, eb := f.Pair(capsFor(cfg), capsFor(cfg))
	a, b := newSide(t, "a", ea, cfg), newSide(t, "b", eb, cfg)
	if err := b.eng.BeginResume([ring.ExchangeSize]byte{}); err != nil {
		t.Fatal(err)
	}
	pa, pb := a.eng.LocalConnData(), b.eng.LocalConnData()
	if err := b.eng.Establish(pa[:]); err != nil {
		t.Fatal(err)
	}
	if err := a.eng.Establish(pb[:]); err != nil {
		t.Fatal(err)
	}
	if n, err := a.eng.Write(make([]byte, 100)); n != 100 || err != nil {
		t.Fatal(n, err)
	}
	for range 100 {
		a.service(len(a.wcs))
		b.service(len(b.wcs))
		f.Step()
	}
	err := b.eng.Err()
	if !errors.Is(err, ring.ErrBadMessage) || !errors.Is(err, ring.ErrProtocol) {
		t.Fatalf("error %v, want a malformed message", err)
	}
	if _, ok := b.eng.PeerExchange(); ok || b.eng.ReadableBytes() != 0 {
		t.Fatalf("exchange taken %v, %d bytes readable", ok, b.eng.ReadableBytes())
	}
}

// A retaining engine cannot read a growing credit window's updates as
// messages consumed: it refuses such a peer at Establish, and a retaining
// engine never offers one itself.
func TestRetainRefusesGrowingWindow(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{})
	retain := ring.Config{RetainUntilReceived: true, SharedRecv: true}
	shared := ring.Config{SharedRecv: true}
	if retain.Normalize().SharedRecv {
		t.Fatal("RetainUntilReceived keeps SharedRecv")
	}
	ea, eb := f.Pair(capsFor(retain), capsFor(shared))
	a, b := newSide(t, "a", ea, retain), newSide(t, "b", eb, shared)
	pa, pb := a.eng.LocalConnData(), b.eng.LocalConnData()
	if pa[1]&ring.FlagGrowingCredits != 0 {
		t.Fatalf("a retaining engine offers a growing window: flags %#x", pa[1])
	}
	if err := a.eng.Establish(pb[:]); !errors.Is(err, ring.ErrBadConnData) {
		t.Fatalf("Establish with a growing peer: %v", err)
	}
}
