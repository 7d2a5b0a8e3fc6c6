package ring_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/wr"
)

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
			runRetainFailure(t, seed)
		})
	}
}

func runRetainFailure(t *testing.T, seed uint64) {
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
	ca, cb := cfg(), cfg()
	ca.IWARP = r.IntN(4) == 0
	cb.IWARP = ca.IWARP
	a, b := connect(t, f, ca, cb)
	sides := [2]*side{a, b}
	streams := [2]*stream{}
	for i := range streams {
		streams[i] = &stream{salt: uint64(i+1) << 40, total: 1 << 30,
			wbuf: make([]byte, 1<<17), rbuf: make([]byte, 1<<17)}
	}
	failAt := 200 + r.IntN(3000)
	victim := sides[r.IntN(2)]
	for step := 0; step < failAt; step++ {
		i := r.IntN(2)
		s, out, in := sides[i], streams[i], streams[1-i]
		switch k := r.IntN(10); {
		case k < 3:
			n := min(logSize(r, len(out.wbuf)), s.eng.SendSpace())
			got, err := s.eng.Write(out.fill(n))
			if err != nil {
				t.Fatalf("%s write: %v", s.name, err)
			}
			out.written += uint64(got)
		case k < 5:
			got, err := s.eng.Read(in.rbuf[:logSize(r, len(in.rbuf))])
			if err != nil {
				t.Fatalf("%s read: %v", s.name, err)
			}
			if err := in.verify(in.rbuf[:got]); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
		case k < 9:
			if _, err := s.service(1 + r.IntN(64)); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
		default:
			f.Step()
		}
		for _, s := range sides {
			s.check(t)
		}
	}

	victim.ep.Fail(wr.WCRetryExcErr)
	// Both ends drain: the victim's work flushes, and what the other end
	// sends it fails once its retries run out; an idle end finds out with
	// its keepalive.
	for round := 0; round < 3 && (a.eng.Err() == nil || b.eng.Err() == nil); round++ {
		for _, s := range sides {
			s.eng.Keepalive() // the driver's timer
		}
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
	for _, s := range sides {
		if s.eng.Err() == nil || s.eng.InFlight() != 0 {
			t.Fatalf("%s: after the failure, error %v with %d sends in flight", s.name, s.eng.Err(), s.eng.InFlight())
		}
	}

	for i := range sides {
		sender, receiver, st := sides[i], sides[1-i], streams[i]
		sent, got := sender.eng.StreamCounts(), receiver.eng.StreamCounts()
		t.Logf("%s -> %s: written %d sent %d released %d, received %d", sender.name, receiver.name,
			sent.Written, sent.Sent, sent.Released, got.Received)
		if sent.Written != st.written {
			t.Fatalf("%s wrote %d, counts say %d", sender.name, st.written, sent.Written)
		}
		// The receiver's reader gets every byte that arrived, then the
		// error.
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

		held, err := resume.HeldBy(sender.eng)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := held.Resend(resume.Exchange{Received: got.Received})
		if err != nil {
			t.Fatalf("%s holds %+v, %s received %d: %v", sender.name, held, receiver.name, got.Received, err)
		}
		if plan.From != got.Received || plan.Shutdown {
			t.Fatalf("resend %+v, want from %d", plan, got.Received)
		}
		// Every byte the receiver lacks is still in the sender's ring.
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
		// Counts outside the bytes held are refused.
		outside := []uint64{held.Sent + 1}
		if held.Released > 0 {
			outside = append(outside, held.Released-1)
		}
		for _, n := range outside {
			if _, err := held.Resend(resume.Exchange{Received: n}); !errors.Is(err, resume.ErrCountOutOfRange) || !errors.Is(err, ring.ErrProtocol) {
				t.Fatalf("count %d with %+v held: %v", n, held, err)
			}
		}
	}
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
