package ring_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/wr"
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

// A connection whose queue pair failed mid-stream resumes with one side
// taking over first: it sends its bytes again, and perhaps its SHUTDOWN,
// and the fabric delivers them all before the other side takes over,
// whose application tries to read and write all along. That side's reader
// still gets the old queue pair's unread bytes first, then the new ones,
// then EOF.
func TestTakeOverOneSideFirst(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			c := failMidStream(t, seed)
			for _, st := range c.streams {
				if st.total == 1<<40 {
					st.total = st.written + uint64(c.r.IntN(300<<10))
				}
			}
			c.resumeToEOF(t, seed, true)
		})
	}
}

// beginResume makes the fresh engines of c's resume on a new fabric, each
// sending the exchange its old engine's counts make, and establishes them.
func (c *failedConn) beginResume(t *testing.T) (*simfabric.Fabric, [2]*side) {
	t.Helper()
	f := simfabric.New(7, simfabric.Options{})
	ea, eb := f.Pair(capsFor(c.cfgs[0]), capsFor(c.cfgs[1]))
	fresh := [2]*side{newSide(t, "a2", ea, c.cfgs[0]), newSide(t, "b2", eb, c.cfgs[1])}
	for i, s := range fresh {
		old := c.sides[i].eng.StreamCounts()
		if err := s.eng.BeginResume(resume.Exchange{Received: old.Received, EOF: old.PeerShutDown}.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	pa, pb := fresh[0].eng.LocalConnData(), fresh[1].eng.LocalConnData()
	if err := fresh[1].eng.Establish(pa[:]); err != nil {
		t.Fatal(err)
	}
	if err := fresh[0].eng.Establish(pb[:]); err != nil {
		t.Fatal(err)
	}
	return f, fresh
}

// takeOver takes side i of c over on its fresh engine, as the peer's
// exchange says.
func (c *failedConn) takeOver(t *testing.T, fresh [2]*side, i int) {
	t.Helper()
	msg, ok := fresh[i].eng.PeerExchange()
	ex, err := resume.ParseExchange(msg[:])
	if !ok || err != nil || !fresh[i].eng.ResumeReady() {
		t.Fatalf("%s: exchange %v %v, ready %v", fresh[i].name, ok, err, fresh[i].eng.ResumeReady())
	}
	plan := checkHeld(t, c.sides[i], c.streams[i], ex.Received, ex.EOF)
	if err := fresh[i].eng.TakeOver(c.sides[i].eng, plan.From, plan.Shutdown); err != nil {
		t.Fatal(err)
	}
}

// b's queue pair fails with 2000 bytes and its SHUTDOWN sent and lost, and
// 3000 bytes before them unread at a. b takes over first and sends the
// 2000 bytes and SHUTDOWN again, which all reach a's fresh engine before a
// takes over: until then a's reader gets nothing from it, not even EOF,
// and afterwards all 5000 bytes in order, then EOF.
func TestTakeOverPeerFirstWaitsForOldBytes(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{})
	cfg := ring.Config{RetainUntilReceived: true}
	a, b := connect(t, f, cfg, cfg)
	c := &failedConn{r: rand.New(rand.NewPCG(1, 43)), cfgs: [2]ring.Config{cfg, cfg}, sides: [2]*side{a, b}}
	for i := range c.streams {
		c.streams[i] = &stream{salt: uint64(i+1) << 40, wbuf: make([]byte, 5000), rbuf: make([]byte, 1<<17)}
	}
	in := c.streams[1] // b to a
	in.total = 5000
	write := func(n int) {
		if got, err := b.eng.Write(in.fill(n)); got != n || err != nil {
			t.Fatal(got, err)
		}
		in.written += uint64(n)
	}
	write(3000)
	drain(t, f, c.sides)
	write(2000)
	b.eng.CloseWrite()
	in.closeSet = true
	if _, err := b.service(len(b.wcs)); err != nil {
		t.Fatal(err)
	}
	b.ep.Fail(wr.WCRetryExcErr) // before the fabric delivered the 2000 bytes
	a.eng.Keepalive()
	drain(t, f, c.sides)
	if got := a.eng.StreamCounts(); got.Received != 3000 || got.PeerShutDown || a.eng.Err() == nil || b.eng.Err() == nil {
		t.Fatalf("a has %+v; errors %v, %v", got, a.eng.Err(), b.eng.Err())
	}

	f2, fresh := c.beginResume(t)
	for round := 0; !fresh[1].eng.ResumeReady(); round++ {
		if round > 100 {
			t.Fatal("b's exchange never completed")
		}
		drain(t, f2, fresh)
	}
	c.takeOver(t, fresh, 1)
	drain(t, f2, fresh)
	a2 := fresh[0].eng
	if got := a2.StreamCounts(); got.Received != 2000 || !got.PeerShutDown {
		t.Fatalf("a's fresh engine has %+v, want b's 2000 bytes and SHUTDOWN", got)
	}
	n, err := a2.Read(in.rbuf)
	if n != 0 || err != nil || a2.ReadableBytes() != 0 || a2.Readable() || a2.RecvSpan() != nil || a2.PeerClosedWrite() {
		t.Fatalf("before TakeOver: Read %d, %v; %d readable (%v), span %d bytes, peer closed %v",
			n, err, a2.ReadableBytes(), a2.Readable(), len(a2.RecvSpan()), a2.PeerClosedWrite())
	}
	c.takeOver(t, fresh, 0)
	if !a2.Readable() || a2.ReadableBytes() != 5000 {
		t.Fatalf("after TakeOver: %d bytes readable, want 5000", a2.ReadableBytes())
	}
	for !in.eof {
		n, err := a2.Read(in.rbuf)
		switch {
		case errors.Is(err, io.EOF) && in.read == in.total:
			in.eof = true
		case err != nil || n == 0:
			t.Fatalf("Read after %d of %d bytes: %d, %v", in.read, in.total, n, err)
		}
		if err := in.verify(in.rbuf[:n]); err != nil {
			t.Fatal(err)
		}
	}
}

// A credit update whose SGL part is malformed releases none of the bytes
// its limit shows consumed: the message fails as a whole.
func TestRetainReleasesNothingOnBadCreditMessage(t *testing.T) {
	s, p := newHostile(t, ring.Config{RetainUntilReceived: true})
	for range 3 {
		if n, err := s.eng.Write(make([]byte, 100)); n != 100 || err != nil {
			t.Fatal(n, err)
		}
		if _, err := s.service(len(s.wcs)); err != nil {
			t.Fatal(err)
		}
	}
	if c := s.eng.StreamCounts(); c.Sent != 300 {
		t.Fatalf("sent %d, want 300", c.Sent)
	}
	// The limit shows all three messages consumed; the write carries 8
	// bytes into the target SGL, neither nothing nor an rs_sge.
	p.post(wr.OpWriteImm, uint32(ring.MakeMsg(ring.MsgSGL, 64+3)), p.theirs.TargetSGL.Addr, p.theirs.TargetSGL.Key, make([]byte, 8))
	expectFailure(t, s, ring.ErrBadSGL)
	if c := s.eng.StreamCounts(); c.Released != 0 {
		t.Fatalf("released %d bytes on a malformed credit message", c.Released)
	}
}

// A peer that advertises the largest window (65535 credits) does not make
// a retaining engine set aside room for as many message lengths at once.
func TestRetainLengthsGrowWithUse(t *testing.T) {
	cfg := ring.Config{RetainUntilReceived: true}
	l := cfg.Layout()
	e, err := ring.New(cfg, ring.Region{Buf: make([]byte, l.SendRegion)},
		ring.Region{Buf: make([]byte, l.RecvRegion)}, ring.Region{Buf: make([]byte, l.TargetRegion)})
	if err != nil {
		t.Fatal(err)
	}
	peer := ring.ConnData{Version: 1, Flags: ring.FlagIOMap, Credits: 65535,
		TargetSGL: ring.RemoteSGE{Addr: 0x1000, Key: 1, Length: 2},
		DataBuf:   ring.RemoteSGE{Addr: 0x2000, Key: 2, Length: 4096}}
	pd := peer.Encode()
	if err := e.Establish(pd[:]); err != nil {
		t.Fatal(err)
	}
	if n := e.SentLengthsCap(); n > 16 {
		t.Fatalf("room for %d lengths before any message was sent", n)
	}
}
