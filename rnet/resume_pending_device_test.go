//go:build linux && cgo

package rnet

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/ring"
)

// stalledFlood sends target connection requests from local that the
// listener accepts and whose dialer never confirms (an id without a queue
// pair sends no RTU), one every pace, until stop, at most max, each naming
// a queue pair number of its own; release destroys them all.
type stalledFlood struct {
	mu   sync.Mutex
	ids  []func()
	errs []error
	done chan struct{}
}

func startStalledFlood(ctx context.Context, local netip.Addr, target netip.AddrPort, pace time.Duration, max int, stop <-chan struct{}) *stalledFlood {
	f := &stalledFlood{done: make(chan struct{})}
	private := encode(ring.ConnData{
		Version: 1, Flags: ring.FlagIOMap, Credits: 16,
		TargetSGL: ring.RemoteSGE{Addr: 0x10000, Key: 7, Length: 2},
		DataBuf:   ring.RemoteSGE{Addr: 0x20000, Key: 7, Length: 1 << 16},
	})
	go func() {
		defer close(f.done)
		tick := time.NewTicker(pace) // the flood's rate, not a synchronisation
		defer tick.Stop()
		for i := range max {
			ch, err := cm.NewEventChannel()
			if err != nil {
				f.fail(err)
				return
			}
			id, err := ch.NewID()
			if err != nil {
				ch.Close()
				f.fail(err)
				return
			}
			f.mu.Lock()
			f.ids = append(f.ids, sync.OnceFunc(func() { id.Close(); ch.Close() }))
			f.mu.Unlock()
			if err := id.Resolve(ctx, local, target, cm.Retry{Tries: 3, Timeout: time.Second}); err != nil {
				f.fail(err)
				return
			}
			p := cm.RsocketConnParam(private)
			// The connection manager takes a request naming the same
			// remote queue pair as a connection it knows for a stale one,
			// and refuses it: each names a number of its own, above any
			// rxe gives a real queue pair (fewer than 1<<17), so that
			// none is taken for the resume's own.
			p.QPNum = 0xf00000 + uint32(i)
			if err := id.Connect(p); err != nil {
				f.fail(err)
				return
			}
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	}()
	return f
}

// failed returns the flood's first error, if it has stopped on one.
func (f *stalledFlood) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) > 0 {
		return f.errs[0]
	}
	return nil
}

func (f *stalledFlood) fail(err error) {
	f.mu.Lock()
	f.errs = append(f.errs, err)
	f.mu.Unlock()
}

// release waits for the flood to stop and destroys its ids.
func (f *stalledFlood) release(t *testing.T) {
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.ids {
		r()
	}
	for _, err := range f.errs {
		t.Errorf("the flood: %v", err)
	}
}

// TestRXEResumeWithEveryPendingSlotTaken: a listener whose one
// pending-handshake slot, and the line for it, a flood of requests whose
// dialers never confirm keeps full (new connections that stall) still
// resumes an established connection at once: a resume's handshake takes
// no slot. Every byte of a pattern stream each way arrives, and nothing is
// left once all is closed.
func TestRXEResumeWithEveryPendingSlotTaken(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	// Backlog 1 once also sized the kernel's queue of requests for the
	// acceptor (rdma_listen), which then dropped the resume's request now
	// and then, as the flood's filled it, for a resend 4 s later: at the
	// default ResumeTimeout one resume in five failed.
	cfg := &Config{Resume: true}
	lc := &ListenConfig{Config: cfg, MaxPendingHandshakes: 1, Backlog: 1}
	ln, err := lc.Listen(t.Context(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	c, s := dialResume(t, ln, pair.Client, pair.Server, cfg)
	// The flood outpaces the eviction of stalled handshakes (a slot's
	// holder is stale after stalledHandshakeAfter) twentyfold: the slot
	// stays held and its line full while the connection resumes, but for
	// a twentieth of the time after each eviction. Faster, the guest's
	// connection manager drops requests, the resume's among them.
	// The flood's own context: t.Context ends before the cleanup stops it.
	floodCtx, stopResolving := context.WithCancel(context.Background())
	stop := make(chan struct{})
	flood := startStalledFlood(floodCtx, pair.Client, ln.Addr().(*Addr).AddrPort, stalledHandshakeAfter/20, 400, stop)
	cleaned := false
	cleanup := func() {
		if cleaned {
			return
		}
		cleaned = true
		close(stop)
		flood.release(t)
		stopResolving()
		c.Close()
		s.Close()
		ln.Close()
	}
	t.Cleanup(cleanup)
	conntest.Until(t, "the flood holds the listener's pending slot and fills its line", func() bool {
		if err := flood.failed(); err != nil {
			t.Fatalf("the flood: %v", err)
		}
		m := ln.Metrics()
		return m.Gauges.PendingHandshakes == 1 && m.Counters.Refused["pending_full"] > 0
	})
	resumes := func(c *Conn) (n uint64) {
		for _, k := range c.conn.Stats().Resume.Resumes {
			n += k
		}
		return n
	}
	const total, at = 4 << 20, 1 << 20
	var cutAt time.Time
	err = patternStreams(c, s, total, at, func() {
		cutAt = time.Now()
		if err := failQueuePair(c); err != nil {
			t.Errorf("fail the dialer's queue pair: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("the streams across the resume: %v", err)
	}
	if cutAt.IsZero() {
		t.Fatal("the streams ended before the cut")
	}
	if resumes(c) != 1 || resumes(s) != 1 {
		t.Errorf("want one resume at each end: dialer %+v, listener %+v", c.conn.Stats().Resume, s.conn.Stats().Resume)
	}
	cleanup()
	checkReleased(t, gor0, fds0, res0)
}
