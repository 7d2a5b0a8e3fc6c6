package ring_test

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
)

// randomConfig draws a configuration, often with tiny buffers and queues
// so wrap-around, credit and buffer stalls happen all the time.
func randomConfig(r *rand.Rand) ring.Config {
	pick := func(vals ...int) int { return vals[r.IntN(len(vals))] }
	return ring.Config{
		SendBufferSize:  pick(64, 100, 1000, 4096, 10000, 65536, 0),
		RecvBufferSize:  pick(64, 128, 1000, 4096, 10000, 65536, 0),
		SendQueueSize:   pick(16, 17, 24, 64, 0),
		RecvQueueSize:   pick(16, 20, 33, 64, 0),
		InlineThreshold: pick(ring.NoInline, 8, 16, 64, 200),
		// Rings that start small grow and shrink (see regions.go).
		IdleBufferSize: pick(64, 256, 1000, 4096, ring.MaxBufSize, 0),
		IWARP:          r.IntN(4) == 0,
		// Credit windows that start small and grow (Normalize clears
		// it with IWARP).
		SharedRecv: r.IntN(2) == 0,
		Autocork:   r.IntN(2) == 0,
	}
}

type propertyRun struct {
	seed    uint64
	r       *rand.Rand
	f       *simfabric.Fabric
	sides   [2]*side
	streams [2]*stream // streams[i] is written by sides[i]
	closeFn [2]string  // how side i ends its stream: "closewrite" or "close"
	bias    float64    // chance an action is on side 1: skew makes one side poll rarely
}

// TestPropertyStream pushes random amounts of data both ways through two
// engines on the simulated fabric, with random write and read sizes from
// 1 B to 1 MiB, random delivery and completion delays and random CQ batch
// sizes, and checks that every byte arrives exactly once and in order, that
// accounting invariants hold after every step, that the fabric never sees an
// RNR, and that both ends finish with a clean EOF.
var propertySeeds = flag.Int("property.seeds", 200, "seeds for TestPropertyStream (more for a soak run)")

func TestPropertyStream(t *testing.T) { runPropertySeeds(t, false) }

// TestPropertyStreamRetaining is TestPropertyStream with both ends keeping
// their sent bytes until the peer's credits show them consumed
// (RetainUntilReceived): every stream still finishes, whatever the sizes
// of the two ends' rings, and the kept lengths add up after every step.
func TestPropertyStreamRetaining(t *testing.T) { runPropertySeeds(t, true) }

func runPropertySeeds(t *testing.T, retain bool) {
	seeds := *propertySeeds
	if testing.Short() || raceEnabled {
		seeds = min(seeds, 40)
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			runProperty(t, seed, retain)
		})
	}
}

func runProperty(t *testing.T, seed uint64, retain bool) {
	r := rand.New(rand.NewPCG(seed, 42))
	p := &propertyRun{seed: seed, r: r, bias: []float64{0.5, 0.5, 0.1, 0.9, 0.02}[r.IntN(5)]}
	p.f = simfabric.New(seed, simfabric.Options{
		MaxWireDelay:       r.IntN(6),
		MaxCompletionDelay: r.IntN(10),
	})
	ca, cb := randomConfig(r), randomConfig(r)
	cb.IWARP = ca.IWARP // one transport per connection
	ca.RetainUntilReceived, cb.RetainUntilReceived = retain, retain
	p.sides[0], p.sides[1] = connect(t, p.f, ca, cb)
	for i := range p.streams {
		// Long streams through big buffers, shorter ones through tiny
		// buffers (where every transfer is a handful of bytes).
		smallest := min(ca.Normalize().SendBufferSize, cb.Normalize().RecvBufferSize)
		if i == 1 {
			smallest = min(cb.Normalize().SendBufferSize, ca.Normalize().RecvBufferSize)
		}
		total := uint64(r.IntN(min(3<<20, 300*smallest)))
		if r.IntN(5) == 0 {
			total = uint64(r.IntN(100))
		}
		p.streams[i] = &stream{salt: uint64(i) << 40, total: total,
			wbuf: make([]byte, 1<<20), rbuf: make([]byte, 1<<20)}
		p.closeFn[i] = []string{"closewrite", "close"}[r.IntN(2)]
	}
	// A side that closes fully cannot read afterwards; let the other
	// direction finish first in that case by closing only when its own
	// reading is done.
	t.Logf("seed %d configs a=%+v b=%+v totals %d/%d close %v bias %v",
		seed, ca, cb, p.streams[0].total, p.streams[1].total, p.closeFn, p.bias)

	idle := 0
	for step := 0; ; step++ {
		if step > 5_000_000 {
			t.Fatal("too many steps")
		}
		moved, err := p.act()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.sides {
			s.check(t)
		}
		if st := p.f.Stats(); st.RNR != 0 || st.Errors != 0 {
			t.Fatalf("fabric: %+v", st)
		}
		if p.done() {
			break
		}
		if moved {
			idle = 0
		} else if idle++; idle > 100000 {
			t.Fatalf("stuck: streams %+v %+v; a %+v; b %+v", *p.streams[0], *p.streams[1],
				p.sides[0].eng.Stats(), p.sides[1].eng.Stats())
		}
	}
	for _, s := range p.sides {
		st := s.eng.Stats()
		t.Logf("%s: %+v", s.name, st)
		if st.ErrorCompletions != 0 {
			t.Fatalf("%s: error completions %+v", s.name, st)
		}
	}
}

func (p *propertyRun) done() bool {
	for i, s := range p.sides {
		if !p.streams[1-i].eof && p.closeFn[i] != "close" {
			return false
		}
		if !s.eng.Flushed() {
			return false
		}
	}
	return p.f.Pending() == false && p.streams[0].closeSet && p.streams[1].closeSet &&
		(p.streams[0].eof || p.closeFn[1] == "close") && (p.streams[1].eof || p.closeFn[0] == "close")
}

// act performs one random action and reports whether something moved.
func (p *propertyRun) act() (bool, error) {
	r := p.r
	i := 0
	if r.Float64() < p.bias {
		i = 1
	}
	s, out, in := p.sides[i], p.streams[i], p.streams[1-i]
	switch k := r.IntN(10); {
	case k < 3: // application write
		if out.written < out.total {
			n := logSize(r, int(out.total-out.written))
			space := s.eng.SendSpace()
			// Only the bytes Write can take need the pattern; the rest
			// must be left alone.
			b := out.wbuf[:n]
			out.fill(min(n, space))
			got, err := s.eng.Write(b)
			if err != nil {
				return true, fmt.Errorf("%s write: %w", s.name, err)
			}
			if got != min(n, space) {
				return true, fmt.Errorf("%s: wrote %d of %d with %d free", s.name, got, n, space)
			}
			out.written += uint64(got)
			return got > 0, nil
		}
		if !out.closeSet && p.mayClose(i) {
			out.closeSet = true
			if p.closeFn[i] == "close" {
				s.eng.Close()
			} else {
				s.eng.CloseWrite()
			}
			return true, nil
		}
	case k < 6: // application read
		if p.streams[i].closeSet && p.closeFn[i] == "close" {
			return false, nil
		}
		n := logSize(r, len(in.rbuf))
		got, err := s.eng.Read(in.rbuf[:n])
		if err == io.EOF {
			if in.read != in.total {
				return true, fmt.Errorf("%s: EOF after %d of %d bytes", s.name, in.read, in.total)
			}
			moved := !in.eof
			in.eof = true
			return moved, nil
		}
		if err != nil {
			return true, fmt.Errorf("%s read: %w", s.name, err)
		}
		if got > n {
			return true, errors.New("read more than asked")
		}
		return got > 0, in.verify(in.rbuf[:got])
	case k < 9: // driver loop
		return s.service(1 + r.IntN(64))
	case r.IntN(20) == 0:
		// The driver's tick: rings shrink after a quiet spell. Not
		// progress in itself.
		s.eng.Quiet()
		s.declineRegions = r.IntN(4) == 0
		s.declineCredits = r.IntN(4) == 0
		return false, nil
	default:
		return p.f.Step(), nil
	}
	return false, nil
}

// mayClose lets side i close once it wrote everything; a full Close also
// waits until it has read everything it will get, since Close ends reading.
func (p *propertyRun) mayClose(i int) bool {
	if p.closeFn[i] != "close" {
		return true
	}
	in := p.streams[1-i]
	return in.read == in.total
}
