package ring_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/wr"
)

// failedConn is a connection whose queue pair failed in the middle of two
// streams, one each way (streams[i] is written by sides[i]), both ends
// keeping their sent bytes, and both drained of completions.
type failedConn struct {
	r       *rand.Rand
	cfgs    [2]ring.Config
	sides   [2]*side
	streams [2]*stream
	// lost counts the completions the failed end's device lost, and
	// stuck the sends it still had in flight after the drain.
	lost, stuck int
}

func failMidStream(t *testing.T, seed uint64) *failedConn { return failMidStreamWith(t, seed, false) }

// failMidStreamWith is failMidStream; with removeDevice the failed end's
// device goes away (FailLosingCompletions) and the driver destroys its
// queue pair once drained (QueuePairDestroyed).
func failMidStreamWith(t *testing.T, seed uint64, removeDevice bool) *failedConn {
	r := rand.New(rand.NewPCG(seed, 43))
	f := simfabric.New(seed, simfabric.Options{MaxWireDelay: r.IntN(6), MaxCompletionDelay: r.IntN(10)})
	pick := func(vals ...int) int { return vals[r.IntN(len(vals))] }
	cfg := func() ring.Config {
		return ring.Config{
			SendBufferSize:      pick(1000, 4096, 65536, 0),
			RecvBufferSize:      pick(1000, 4096, 65536, 0),
			RecvQueueSize:       pick(16, 33, 0),
			IdleBufferSize:      pick(256, 4096, 0),
			Autocork:            r.IntN(2) == 0,
			RetainUntilReceived: true,
		}
	}
	c := &failedConn{r: r}
	c.cfgs = [2]ring.Config{cfg(), cfg()}
	c.cfgs[0].IWARP = r.IntN(4) == 0
	c.cfgs[1].IWARP = c.cfgs[0].IWARP
	a, b := connect(t, f, c.cfgs[0], c.cfgs[1])
	c.sides = [2]*side{a, b}
	for i := range c.streams {
		c.streams[i] = &stream{salt: uint64(i+1) << 40, total: 1 << 40,
			wbuf: make([]byte, 1<<17), rbuf: make([]byte, 1<<17)}
		if r.IntN(3) == 0 && (i == 0 || c.streams[0].total == 1<<40) {
			// One stream that ends, with a SHUTDOWN, around the failure
			// (both ending would finish the connection before it).
			c.streams[i].total = uint64(r.IntN(50 << 10))
		}
	}
	failAt := 200 + r.IntN(3000)
	for step := 0; step < failAt; step++ {
		i := r.IntN(2)
		if _, err := c.act(r, c.sides[i], c.streams[i], c.streams[1-i], f); err != nil {
			t.Fatal(err)
		}
		for _, s := range c.sides {
			s.check(t)
		}
	}

	victim := c.sides[r.IntN(2)]
	if removeDevice {
		for range r.IntN(4) {
			f.Step() // completions the victim has not polled yet
		}
		c.lost = victim.ep.FailLosingCompletions(wr.WCGeneralErr)
	} else {
		victim.ep.Fail(wr.WCRetryExcErr)
	}
	// Both ends drain: the victim's work flushes, and what the other end
	// sends it fails once its retries run out; an idle end finds out with
	// its keepalive.
	for round := 0; round < 3 && (a.eng.Err() == nil || b.eng.Err() == nil); round++ {
		for _, s := range c.sides {
			s.eng.Keepalive() // the driver's timer
		}
		drain(t, f, c.sides)
	}
	if removeDevice {
		c.stuck = victim.eng.InFlight()
		if err := victim.eng.Err(); errors.Is(err, ring.ErrUnknownCompletion) {
			t.Fatalf("%s: %v", victim.name, err)
		}
		victim.eng.QueuePairDestroyed()
	}
	for _, s := range c.sides {
		if s.eng.Err() == nil || s.eng.InFlight() != 0 {
			t.Fatalf("%s: after the failure, error %v with %d sends in flight", s.name, s.eng.Err(), s.eng.InFlight())
		}
	}
	return c
}

// act is one random step of an application and its driver on side s.
func (c *failedConn) act(r *rand.Rand, s *side, out, in *stream, f *simfabric.Fabric) (bool, error) {
	switch k := r.IntN(10); {
	case k < 3:
		if out.written == out.total {
			if !out.closeSet {
				out.closeSet = true
				s.eng.CloseWrite()
				return true, nil
			}
			return false, nil
		}
		n := min(logSize(r, len(out.wbuf)), s.eng.SendSpace(), int(out.total-out.written))
		got, err := s.eng.Write(out.fill(n))
		if err != nil {
			return true, fmt.Errorf("%s write: %w", s.name, err)
		}
		out.written += uint64(got)
		return got > 0, nil
	case k < 5:
		got, err := s.eng.Read(in.rbuf[:logSize(r, len(in.rbuf))])
		switch {
		case errors.Is(err, io.EOF) && in.read == in.total:
			moved := !in.eof
			in.eof = true
			return moved, nil
		case err != nil:
			return true, fmt.Errorf("%s read after %d of %d bytes: %w", s.name, in.read, in.total, err)
		}
		return got > 0, in.verify(in.rbuf[:got])
	case k < 9:
		return s.service(1 + r.IntN(64))
	default:
		return f.Step(), nil
	}
}

func drain(t *testing.T, f *simfabric.Fabric, sides [2]*side) {
	t.Helper()
	for idle := 0; idle < 3; {
		moved := f.Step()
		for _, s := range sides {
			m, _ := s.service(len(s.wcs))
			moved = moved || m
			s.check(t)
		}
		if moved || f.Pending() {
			idle = 0
		} else {
			idle++
		}
	}
}

// A queue pair that fails in the middle of two streams, one each way, with
// both ends keeping their sent bytes (RetainUntilReceived): once both ends
// have drained their completions, each receiver's count of bytes received
// lies within what its sender still holds, every byte from there to what
// the sender's application wrote is in the sender's ring, and every byte
// before it reached the receiver's reader: each byte of each stream is
// checked, on one side or the other. The exchange's range check accepts the
// receiver's count and refuses the counts just outside the bytes held.
func TestRetainedBytesOutliveFailedQueuePair(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			c := failMidStream(t, seed)
			for i := range c.sides {
				sender, receiver, st := c.sides[i], c.sides[1-i], c.streams[i]
				got := receiver.eng.StreamCounts()
				// The receiver's reader gets every byte that arrived,
				// then the error.
				for {
					n, err := receiver.eng.Read(st.rbuf)
					if err := st.verify(st.rbuf[:n]); err != nil {
						t.Fatalf("%s: %v", receiver.name, err)
					}
					if n == 0 {
						if err == nil {
							t.Fatalf("%s: Read gave neither bytes nor the error", receiver.name)
						}
						break
					}
				}
				if st.read != got.Received {
					t.Fatalf("%s read %d bytes, received %d", receiver.name, st.read, got.Received)
				}
				checkHeld(t, sender, st, got.Received, got.PeerShutDown)
			}
		})
	}
}

// checkHeld checks that sender holds every byte of st from received on,
// and that the exchange's range check takes received and refuses the
// counts just outside the bytes held. It returns what to send again.
func checkHeld(t *testing.T, sender *side, st *stream, received uint64, peerEOF bool) resume.ResendPlan {
	t.Helper()
	sent := sender.eng.StreamCounts()
	t.Logf("%s: written %d sent %d released %d shutdown %v; the peer received %d, EOF %v", sender.name,
		sent.Written, sent.Sent, sent.Released, sent.ShutDown, received, peerEOF)
	if sent.Written != st.written {
		t.Fatalf("%s wrote %d, counts say %d", sender.name, st.written, sent.Written)
	}
	held, err := resume.HeldBy(sender.eng)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := held.Resend(resume.Exchange{Received: received, EOF: peerEOF})
	if err != nil {
		t.Fatalf("%s holds %+v, the peer received %d: %v", sender.name, held, received, err)
	}
	if plan.From != received || plan.Shutdown != (sent.ShutDown && !peerEOF) {
		t.Fatalf("resend %+v, want from %d, SHUTDOWN again %v", plan, received, sent.ShutDown && !peerEOF)
	}
	x, y, err := sender.eng.Held(plan.From)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(x)+len(y)) != st.written-plan.From {
		t.Fatalf("%s holds %d bytes from %d, wrote up to %d", sender.name, len(x)+len(y), plan.From, st.written)
	}
	for j, c := range append(append([]byte(nil), x...), y...) {
		if want := pattern(plan.From+uint64(j), st.salt); c != want {
			t.Fatalf("%s: held byte %d is %#x, want %#x", sender.name, plan.From+uint64(j), c, want)
		}
	}
	outside := []uint64{held.Sent + 1}
	if held.Released > 0 {
		outside = append(outside, held.Released-1)
	}
	for _, n := range outside {
		if _, err := held.Resend(resume.Exchange{Received: n}); !errors.Is(err, resume.ErrCountOutOfRange) || !errors.Is(err, ring.ErrProtocol) {
			t.Fatalf("count %d with %+v held: %v", n, held, err)
		}
	}
	return plan
}

// A connection whose queue pair failed mid-stream carries on over a fresh
// one: fresh engines exchange counts, take the old ones' held and unread
// bytes over (TakeOver), and both streams then run to their end, every
// byte checked once, in order, and both ends see EOF.
func TestTakeOverResumesStreamsOnFreshQueuePair(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			c := failMidStream(t, seed)
			for _, st := range c.streams {
				if st.total == 1<<40 {
					st.total = st.written + uint64(c.r.IntN(300<<10))
				}
			}
			c.resumeToEOF(t, seed, false)
		})
	}
}

// A SHUTDOWN lost with the queue pair, with the bytes before it, goes
// again after them on the fresh one: the exchange says the peer has
// neither, and its reader gets every byte, then EOF.
func TestTakeOverSendsLostShutdownAgain(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{})
	cfg := ring.Config{RetainUntilReceived: true}
	a, b := connect(t, f, cfg, cfg)
	c := &failedConn{r: rand.New(rand.NewPCG(1, 43)), cfgs: [2]ring.Config{cfg, cfg}, sides: [2]*side{a, b}}
	for i := range c.streams {
		c.streams[i] = &stream{salt: uint64(i+1) << 40, wbuf: make([]byte, 5000), rbuf: make([]byte, 1<<17)}
	}
	out := c.streams[0]
	out.total = 5000
	if n, err := a.eng.Write(out.fill(5000)); n != 5000 || err != nil {
		t.Fatal(n, err)
	}
	out.written, out.closeSet = 5000, true
	a.eng.CloseWrite()
	if _, err := a.service(len(a.wcs)); err != nil {
		t.Fatal(err)
	}
	if c := a.eng.StreamCounts(); c.Sent != 5000 || !c.ShutDown {
		t.Fatalf("posted %+v, want 5000 bytes and SHUTDOWN", c)
	}
	a.ep.Fail(wr.WCRetryExcErr) // before the fabric delivered any of it
	b.eng.Keepalive()
	drain(t, f, c.sides)
	if b.eng.StreamCounts().Received != 0 || a.eng.Err() == nil || b.eng.Err() == nil {
		t.Fatalf("b received %d; errors %v, %v", b.eng.StreamCounts().Received, a.eng.Err(), b.eng.Err())
	}
	plans := c.resumeToEOF(t, 1, false)
	if plans[0] != (resume.ResendPlan{From: 0, Shutdown: true}) {
		t.Fatalf("a resends %+v, want everything and SHUTDOWN", plans[0])
	}
}

// resumeToEOF resumes c on a fresh queue pair (fresh engines, the exchange,
// TakeOver) and runs both streams to EOF, every byte checked. It returns
// what each side sent again. With oneFirst, one side takes over as soon as
// it can and runs until the fabric is quiet, its peer's application
// reading and writing all along on the fresh engine, before the peer
// takes over.
func (c *failedConn) resumeToEOF(t *testing.T, seed uint64, oneFirst bool) [2]resume.ResendPlan {
	t.Helper()
	r := c.r
	f := simfabric.New(seed+1000, simfabric.Options{MaxWireDelay: r.IntN(6), MaxCompletionDelay: r.IntN(10)})
	var cfgs [2]ring.Config
	for i, s := range c.sides {
		cfgs[i] = c.cfgs[i]
		ring, _ := s.eng.RingSizes()
		cfgs[i].IdleBufferSize = max(cfgs[i].Normalize().IdleBufferSize, ring)
	}
	ea, eb := f.Pair(capsFor(cfgs[0]), capsFor(cfgs[1]))
	fresh := [2]*side{newSide(t, "a2", ea, cfgs[0]), newSide(t, "b2", eb, cfgs[1])}
	for i, s := range fresh {
		old := c.sides[i].eng.StreamCounts()
		own := resume.Exchange{Received: old.Received, EOF: old.PeerShutDown}.Encode()
		if err := s.eng.BeginResume(own); err != nil {
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
	var plans [2]resume.ResendPlan
	takeOver := func(i int) {
		t.Helper()
		s := fresh[i]
		for round := 0; !s.eng.ResumeReady(); round++ {
			if round > 1000 {
				t.Fatalf("%s: the exchange never completed", s.name)
			}
			drain(t, f, fresh)
		}
		msg, _ := s.eng.PeerExchange()
		ex, err := resume.ParseExchange(msg[:])
		if err != nil {
			t.Fatal(err)
		}
		plans[i] = checkHeld(t, c.sides[i], c.streams[i], ex.Received, ex.EOF)
		if err := s.eng.TakeOver(c.sides[i].eng, plans[i].From, plans[i].Shutdown); err != nil {
			t.Fatal(err)
		}
	}
	if oneFirst {
		first := r.IntN(2)
		takeOver(first)
		for range r.IntN(3000) {
			i := r.IntN(2)
			if _, err := c.act(r, fresh[i], c.streams[i], c.streams[1-i], f); err != nil {
				t.Fatal(err)
			}
			for _, s := range fresh {
				s.check(t)
			}
		}
		drain(t, f, fresh)
		takeOver(1 - first)
	} else {
		for round := 0; !fresh[0].eng.ResumeReady() || !fresh[1].eng.ResumeReady(); round++ {
			if round > 1000 {
				t.Fatal("the exchange never completed")
			}
			drain(t, f, fresh)
		}
		takeOver(0)
		takeOver(1)
	}
	idle := 0
	for !c.streams[0].eof || !c.streams[1].eof {
		i := r.IntN(2)
		moved, err := c.act(r, fresh[i], c.streams[i], c.streams[1-i], f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range fresh {
			s.check(t)
		}
		if moved {
			idle = 0
		} else if idle++; idle > 100000 {
			t.Fatalf("stuck after the resume: read %d of %d and %d of %d",
				c.streams[0].read, c.streams[0].total, c.streams[1].read, c.streams[1].total)
		}
	}
	for i, s := range fresh {
		// Counters carry on from the old engine's: no error completion
		// on the fresh queue pair.
		old := c.sides[i].eng.Stats()
		st := s.eng.Stats()
		if s.eng.Err() != nil || st.ErrorCompletions != old.ErrorCompletions {
			t.Fatalf("%s: %v, %+v (old engine's: %+v)", s.name, s.eng.Err(), st, old)
		}
		nv, ov := reflect.ValueOf(st), reflect.ValueOf(old)
		for k := range nv.NumField() {
			if nv.Field(k).Uint() < ov.Field(k).Uint() {
				t.Fatalf("%s: %s went from %d to %d", s.name, nv.Type().Field(k).Name, ov.Field(k).Uint(), nv.Field(k).Uint())
			}
		}
		// Bytes sent again count once.
		if sent := s.eng.StreamCounts().Sent; st.BytesSent != sent {
			t.Fatalf("%s: BytesSent %d, the stream's %d", s.name, st.BytesSent, sent)
		}
	}
	return plans
}

// Off, a sender lets its bytes go as their transfers complete, whatever
// the peer has read; on, it keeps them until the peer's credit updates
// show them consumed.
func TestRetainKeepsBytesUntilConsumed(t *testing.T) {
	for _, retain := range []bool{false, true} {
		t.Run(fmt.Sprint("retain=", retain), func(t *testing.T) {
			f := simfabric.New(1, simfabric.Options{})
			cfg := ring.Config{SendBufferSize: 4096, RecvBufferSize: 4096, IdleBufferSize: ring.MaxBufSize,
				RecvQueueSize: 16, RetainUntilReceived: retain}
			a, b := connect(t, f, cfg, cfg)
			st := &stream{salt: 7, total: 1 << 20, wbuf: make([]byte, 4096), rbuf: make([]byte, 4096)}
			pump := func() {
				t.Helper()
				for moved := true; moved; {
					m1, err1 := a.service(len(a.wcs))
					m2, err2 := b.service(len(b.wcs))
					if err1 != nil || err2 != nil {
						t.Fatal(err1, err2)
					}
					moved = m1 || m2 || f.Step()
				}
			}
			// Three messages the peer receives and does not read.
			for range 3 {
				n, err := a.eng.Write(st.fill(100))
				if n != 100 || err != nil {
					t.Fatal(n, err)
				}
				st.written += 100
				pump()
			}
			c := a.eng.StreamCounts()
			if c.Sent != 300 || b.eng.ReadableBytes() != 300 || a.eng.InFlight() != 0 {
				t.Fatalf("sent %d, peer has %d unread, %d in flight", c.Sent, b.eng.ReadableBytes(), a.eng.InFlight())
			}
			space := a.eng.SendSpace()
			_, _, heldErr := a.eng.Held(0)
			if !retain {
				if space != 4096 || c.Released != 0 || !errors.Is(heldErr, ring.ErrNotRetaining) {
					t.Fatalf("off: space %d, released %d, Held: %v", space, c.Released, heldErr)
				}
				return
			}
			if space != 4096-300 || c.Released != 0 || heldErr != nil {
				t.Fatalf("on: space %d, released %d, Held: %v", space, c.Released, heldErr)
			}
			// The peer reads them all, then fills its ring's first half
			// and reads it: the credit update that grants the half back
			// shows every message consumed.
			for st.read < st.written || st.written < 2048 {
				if st.written < 2048 {
					n, _ := a.eng.Write(st.fill(min(100, 2048-int(st.written))))
					st.written += uint64(n)
				}
				pump()
				n, _ := b.eng.Read(st.rbuf)
				if err := st.verify(st.rbuf[:n]); err != nil {
					t.Fatal(err)
				}
				pump()
			}
			c = a.eng.StreamCounts()
			if c.Released != 2048 || a.eng.SendSpace() != 4096 {
				t.Fatalf("after the peer read 2048 bytes: released %d, space %d", c.Released, a.eng.SendSpace())
			}
		})
	}
}

// TestStopRetainingTakesGrowingWindow: an engine built to retain refuses a
// peer whose credit window grows; once StopRetaining has turned retention
// off before Establish, it takes that peer, lets go of each byte once its
// transfer completes, and a stream runs past its ring. After Establish,
// StopRetaining refuses.
func TestStopRetainingTakesGrowingWindow(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{Auto: true})
	retaining := ring.Config{SendBufferSize: 4096, RecvBufferSize: 4096, RetainUntilReceived: true}
	growing := ring.Config{SendBufferSize: 4096, RecvBufferSize: 4096, SharedRecv: true}
	ea, eb := f.Pair(capsFor(retaining), capsFor(growing))
	a, b := newSide(t, "a", ea, retaining), newSide(t, "b", eb, growing)
	pa, pb := a.eng.LocalConnData(), b.eng.LocalConnData()
	if err := a.eng.Establish(pb[:]); !errors.Is(err, ring.ErrBadConnData) {
		t.Fatalf("a retaining engine takes a growing window: %v", err)
	}
	if err := a.eng.StopRetaining(); err != nil {
		t.Fatal(err)
	}
	if a.eng.Config().RetainUntilReceived {
		t.Fatal("still retaining after StopRetaining")
	}
	if err := b.eng.Establish(pa[:]); err != nil {
		t.Fatal(err)
	}
	if err := a.eng.Establish(pb[:]); err != nil {
		t.Fatalf("after StopRetaining: %v", err)
	}
	if err := a.eng.StopRetaining(); err == nil {
		t.Error("StopRetaining after Establish succeeded")
	}
	pumpStream(t, a, b, newStream(3, 64<<10), 1000, 1500)
	if _, _, err := a.eng.Held(0); !errors.Is(err, ring.ErrNotRetaining) {
		t.Errorf("Held after StopRetaining: %v, want ErrNotRetaining", err)
	}
}
