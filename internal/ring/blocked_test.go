package ring_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rnet-dev/rnet/internal/simfabric"
)

// TestBlockedIsEnoughToKeepStreaming checks the promise a driver relies on
// when it stops polling an idle connection: the writer services its engine
// only right after a Write or while Blocked reports held-back work, and the
// reader only when it reads. If Blocked ever said false while written bytes
// or a due credit update waited for a completion, the stream would stall.
func TestBlockedIsEnoughToKeepStreaming(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			f := simfabric.New(seed, simfabric.Options{
				MaxWireDelay:       r.IntN(4),
				MaxCompletionDelay: r.IntN(6),
			})
			ca, cb := randomConfig(r), randomConfig(r)
			cb.IWARP = ca.IWARP
			w, rd := connect(t, f, ca, cb)
			st := &stream{salt: seed, total: uint64(20000 + r.IntN(200000))}
			st.wbuf = make([]byte, 1<<16)
			st.rbuf = make([]byte, 1<<16)
			idle := 0
			for st.read < st.total {
				moved := false
				if st.written < st.total {
					n, err := w.eng.Write(st.fill(min(logSize(r, len(st.wbuf)), int(st.total-st.written))))
					if err != nil {
						t.Fatal(err)
					}
					st.written += uint64(n)
					if m, err := w.service(1 + r.IntN(8)); err != nil {
						t.Fatal(err)
					} else {
						moved = moved || m || n > 0
					}
				} else if w.eng.Blocked() {
					if m, err := w.service(1 + r.IntN(8)); err != nil {
						t.Fatal(err)
					} else {
						moved = moved || m
					}
				}
				if m, err := rd.service(1 + r.IntN(8)); err != nil {
					t.Fatal(err)
				} else {
					moved = moved || m
				}
				n, err := rd.eng.Read(st.rbuf[:logSize(r, len(st.rbuf))])
				if err != nil {
					t.Fatal(err)
				}
				if err := st.verify(st.rbuf[:n]); err != nil {
					t.Fatal(err)
				}
				if n > 0 {
					if _, err := rd.service(1 + r.IntN(8)); err != nil {
						t.Fatal(err)
					}
				}
				f.Step()
				// Judge progress by bytes, not by activity: a stuck
				// pair can stay busy exchanging nothing useful.
				if n > 0 || moved && st.written < st.total {
					idle = 0
				} else if idle++; idle > 5000 {
					t.Fatalf("stalled at %d of %d bytes read (%d written); writer blocked=%v",
						st.read, st.total, st.written, w.eng.Blocked())
				}
			}
			w.check(t)
			rd.check(t)
		})
	}
}
