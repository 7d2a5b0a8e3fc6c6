package ring_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/wr"
)

// side is one connection end as the rnet driver will run it: an engine
// and its simulated queue pair, with reusable batches.
type side struct {
	name  string
	eng   *ring.Engine
	ep    *simfabric.Endpoint
	wcs   []wr.Completion
	sends []wr.Send
	recvs []wr.Recv
	// declineRegions makes the side refuse every region its engine
	// wants, as a driver at its locked-memory limit does.
	declineRegions bool
	retired        []ring.Region
	// declineCredits makes the side give none of the receives a
	// SharedRecv engine wants for a wider credit window, as a driver
	// whose shared queue is fully claimed does.
	declineCredits bool
}

func newSide(t testing.TB, name string, ep *simfabric.Endpoint, cfg ring.Config) *side {
	t.Helper()
	l := cfg.Layout()
	e, err := ring.New(cfg,
		ep.Register(make([]byte, l.SendRegion), false),
		ep.Register(make([]byte, l.RecvRegion), true),
		ep.Register(make([]byte, l.TargetRegion), true))
	if err != nil {
		t.Fatal(err)
	}
	s := &side{name: name, eng: e, ep: ep, wcs: make([]wr.Completion, l.CQDepth)}
	// Receives go up before connecting, as rsocket's rs_create_ep does.
	s.recvs = e.PostRecvs(s.recvs[:0])
	if err := ep.PostRecv(s.recvs); err != nil {
		t.Fatal(err)
	}
	return s
}

func capsFor(cfg ring.Config) simfabric.Caps {
	n := cfg.Normalize()
	l := n.Layout()
	return simfabric.Caps{SendDepth: l.SendDepth, RecvDepth: l.RecvDepth, MaxInline: max(n.InlineThreshold, 4)}
}

// connect makes two established sides on f.
func connect(t testing.TB, f *simfabric.Fabric, ca, cb ring.Config) (*side, *side) {
	t.Helper()
	ea, eb := f.Pair(capsFor(ca), capsFor(cb))
	a, b := newSide(t, "a", ea, ca), newSide(t, "b", eb, cb)
	pa, pb := a.eng.LocalConnData(), b.eng.LocalConnData()
	if err := b.eng.Establish(pa[:]); err != nil {
		t.Fatal(err)
	}
	if err := a.eng.Establish(pb[:]); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// service runs one round of the driver loop, polling at most max
// completions, and returns the engine's error and whether anything moved.
func (s *side) service(max int) (bool, error) {
	n := s.ep.PollCQ(s.wcs[:min(max, len(s.wcs))])
	err := s.eng.Complete(s.wcs[:n])
	if want := s.eng.CreditsWanted(); want > 0 {
		if s.declineCredits {
			want = 0
		}
		s.eng.AddCredits(want)
	}
	s.recvs = s.eng.PostRecvs(s.recvs[:0])
	if perr := s.ep.PostRecv(s.recvs); perr != nil {
		return true, fmt.Errorf("%s: post recv: %w", s.name, perr)
	}
	s.sends = s.eng.PostSends(s.sends[:0])
	if perr := s.ep.PostSend(s.sends); perr != nil {
		return true, fmt.Errorf("%s: post send: %w", s.name, perr)
	}
	moved, rerr := s.serveRegions()
	if rerr != nil {
		return true, rerr
	}
	return moved || n > 0 || len(s.recvs) > 0 || len(s.sends) > 0, err
}

// serveRegions registers the regions the engine wants and deregisters the
// ones it retired, as the rnet driver does after each step.
func (s *side) serveRegions() (bool, error) {
	if !s.eng.RegionWork() {
		return false, nil
	}
	for {
		kind, size, ok := s.eng.RegionWanted()
		if !ok {
			break
		}
		if s.declineRegions {
			s.eng.DeclineRegion(kind)
			continue
		}
		r := s.ep.Register(make([]byte, size), kind == ring.RegionRecv)
		if err := s.eng.AddRegion(kind, r); err != nil {
			return true, fmt.Errorf("%s: add %v region of %d bytes: %w", s.name, kind, size, err)
		}
	}
	s.retired = s.eng.RetiredRegions(s.retired[:0])
	for _, r := range s.retired {
		if !s.ep.Deregister(r) {
			return true, fmt.Errorf("%s: retired region at %#x was not registered", s.name, r.Addr)
		}
	}
	return true, nil
}

func (s *side) check(t testing.TB) {
	t.Helper()
	if err := s.eng.CheckInvariants(); err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
}

// pattern is the byte at offset i of a stream; salt tells streams apart.
func pattern(i uint64, salt uint64) byte {
	x := (i + salt) * 0x9e3779b97f4a7c15
	return byte(x >> 56)
}

// stream writes and verifies one direction of patterned bytes.
type stream struct {
	salt     uint64
	total    uint64
	written  uint64
	read     uint64
	wbuf     []byte
	rbuf     []byte
	eof      bool
	closeSet bool
}

func (st *stream) fill(n int) []byte {
	b := st.wbuf[:n]
	for i := range b {
		b[i] = pattern(st.written+uint64(i), st.salt)
	}
	return b
}

func (st *stream) verify(b []byte) error {
	for i, c := range b {
		if want := pattern(st.read+uint64(i), st.salt); c != want {
			return fmt.Errorf("byte %d: got %#x want %#x", st.read+uint64(i), c, want)
		}
	}
	st.read += uint64(len(b))
	if st.read > st.total {
		return fmt.Errorf("read %d bytes of %d", st.read, st.total)
	}
	return nil
}

// logSize draws a size in [1, max] uniformly on a log scale, so small and
// huge reads and writes are both common.
func logSize(r *rand.Rand, max int) int {
	bits := r.IntN(21) // up to 1 MiB
	n := 1 + r.IntN(1<<bits)
	return min(n, max)
}

var errStuck = errors.New("no progress")
