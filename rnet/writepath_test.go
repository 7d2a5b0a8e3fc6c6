package rnet

import (
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/stream"
	"github.com/rnet-dev/rnet/internal/wr"
)

// writeFrameBudget is how many Go frames, Conn.Write's own included, may
// lie between Conn.Write and the queue pair's Step that posts its bytes:
// Conn.Write, the driver's Write and the driver's one stepping frame. The
// device's Step adds its own two before the crossing into C.
const writeFrameBudget = 3

// stackQP is a simulated queue pair whose Step, while recording, keeps the
// frames between Conn.Write and itself.
type stackQP struct {
	*simqp.QP

	mu        sync.Mutex
	recording bool
	frames    []string // callers of the recorded Step, innermost first, up to Conn.Write
}

func (q *stackQP) Step(flags wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	q.mu.Lock()
	if q.recording && len(sends) > 0 {
		if frames, ok := callersUpTo("/rnet.(*Conn).Write"); ok {
			q.frames, q.recording = frames, false
		}
	}
	q.mu.Unlock()
	return q.QP.Step(flags, recvs, sends, out, tries)
}

// callersUpTo returns the functions calling its caller, innermost first, up
// to and including the first whose name ends in outer; ok says it was found.
func callersUpTo(outer string) (names []string, ok bool) {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		names = append(names, f.Function)
		if strings.HasSuffix(f.Function, outer) {
			return names, true
		}
		if !more {
			return nil, false
		}
	}
}

// TestSimWriteFrameBudget: a Write that fits the send ring reaches the
// queue pair's Step within writeFrameBudget frames of Conn.Write, with no
// callback between, so that the whole path to the crossing into C stays
// short.
func TestSimWriteFrameBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  *Config
	}{
		{"Autocork", nil},
		{"NoDelay", &Config{NoDelay: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q *stackQP
			c, s := simPipeWrap(t, tc.cfg, func(sq *simqp.QP) stream.QueuePair {
				q = &stackQP{QP: sq}
				return q
			})
			defer s.Close()
			defer c.Close()
			q.mu.Lock()
			q.recording = true
			q.mu.Unlock()
			if _, err := c.Write(make([]byte, 64)); err != nil {
				t.Fatal(err)
			}
			q.mu.Lock()
			frames := q.frames
			q.mu.Unlock()
			if frames == nil {
				t.Fatal("Write posted its bytes without a Step called from Conn.Write")
			}
			if len(frames) > writeFrameBudget {
				t.Errorf("%d frames from Conn.Write to Step, want at most %d:\n\t%s",
					len(frames), writeFrameBudget, strings.Join(frames, "\n\t"))
			}
		})
	}
}
