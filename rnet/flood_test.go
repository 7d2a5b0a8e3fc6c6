//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/ring"
)

// TestRXEHandshakeFlood floods a listener with connection requests that
// never complete (the dialer takes the reply and never sends its RTU) while
// a real client dials, echoes and closes, again and again. Every real dial
// must connect, the listener's registered memory must stay within its
// pending-handshake bound all along, and everything must be released after.
// The flood is a count of requests, and the listener evicts a stalled one
// only after it has waited stalledHandshakeAfter, so the test lasts about
// stalledRequests/maxPending times that (about 30 s).
func TestRXEHandshakeFlood(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const (
		stalledRequests = 500
		realDials       = 20
		maxPending      = minDefaultPending // few slots, so that the flood fills them
		// Twice the slots: every slot holds a stalled request and as many
		// more wait for one, well within the connection manager's backlog.
		flooders = 2 * maxPending
	)
	ln, err := (&ListenConfig{MaxPendingHandshakes: maxPending}).Listen(ctx, "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	lnClosed := false
	defer func() {
		if !lnClosed {
			ln.Close()
		}
	}()
	target := ln.Addr().(*Addr).AddrPort

	flood := startStallFlood(t, ctx, pair, target, flooders, stalledRequests, 0)
	defer flood.stopNow()
	// The listener's registered memory, sampled while the flood is on: the
	// pending handshakes, the real connection's two ends and nothing more.
	perConn := func() int {
		l := defaultSettingsLayout()
		return l.SendRegion + l.RecvRegion + l.TargetRegion
	}()
	mrBound := res0["mr"] + 3*(maxPending+2)
	type sample struct {
		most, samples int
		err           error
	}
	sampled := make(chan sample)
	sampleDone := make(chan struct{})
	go func() {
		var s sample
		for {
			select {
			case <-sampleDone:
				sampled <- s
				return
			default:
			}
			out, err := execOutput("rdma", "resource", "show")
			var res map[string]int
			if err == nil {
				res, err = procstat.ParseResources(out)
			}
			if err != nil {
				s.err = err
				sampled <- s
				return
			}
			s.most = max(s.most, res["mr"])
			s.samples++
		}
	}()

	// The real client: a dial, an echo and a close, spread over the flood.
	accepted := make(chan error, realDials+1)
	go func() {
		for range realDials {
			c, err := ln.AcceptRDMA()
			if err != nil {
				accepted <- err
				return
			}
			_, err = io.Copy(c, c)
			c.Close()
			accepted <- err
		}
	}()
	d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}}
	for i := range realDials {
		// Spread over the flood by its count, once its stalled requests
		// have filled every slot.
		flood.waitAnswered(ctx, int64(maxPending+i*(stalledRequests-maxPending)/realDials))
		start := time.Now()
		c, err := d.DialContext(ctx, "rdma", target.String())
		if err != nil {
			t.Errorf("dial %d during the flood (%d requests answered): %v", i, flood.answered.Load(), err)
			break
		}
		took := time.Since(start)
		msg := []byte("through the flood")
		buf := make([]byte, len(msg))
		_, err = c.Write(msg)
		if err == nil {
			_, err = io.ReadFull(c, buf)
		}
		if err != nil || string(buf) != string(msg) {
			t.Errorf("echo %d during the flood: %q, %v", i, buf, err)
		}
		c.Close()
		if err := <-accepted; err != nil {
			t.Errorf("accepted connection %d: %v", i, err)
		}
		t.Logf("dial %d connected in %v with %d stalled requests answered", i, took.Round(time.Millisecond), flood.answered.Load())
	}
	flood.waitAnswered(ctx, stalledRequests)
	close(sampleDone)
	mem := <-sampled
	flood.stopNow()
	t.Logf("%d stalled requests answered, %d given up by the listener, %d refused as busy; at most %d MRs in %d samples (%d before, bound %d: %d KiB pinned by at most %d pending handshakes)",
		flood.answered.Load(), flood.givenUp.Load(), flood.refusedBusy.Load(), mem.most, mem.samples, res0["mr"], mrBound, maxPending*perConn>>10, maxPending)
	// Every request but those still stalled when the flood stopped (one
	// per flooder at most) was given up by the listener: the slots were
	// full of stalled requests throughout.
	if flood.answered.Load() != stalledRequests || flood.givenUp.Load() < stalledRequests-flooders {
		t.Errorf("%d stalled requests answered and %d given up, want %d and at least %d",
			flood.answered.Load(), flood.givenUp.Load(), stalledRequests, stalledRequests-flooders)
	}
	switch {
	case mem.err != nil:
		t.Errorf("sampling the registered memory: %v", mem.err)
	case mem.samples == 0:
		t.Error("the registered memory was never sampled during the flood")
	case mem.most > mrBound:
		t.Errorf("%d MRs during the flood, want at most %d (%d before, 3 for each of %d pending handshakes and 2 real connection ends)",
			mem.most, mrBound, res0["mr"], maxPending)
	}
	ln.Close()
	lnClosed = true
	checkReleased(t, gor0, fds0, res0)
}

// stallFlood is a flood of connection requests that never complete: each
// flooder sends a request, takes the listener's reply and holds its id open
// without ever sending the RTU, until the listener gives up on it (a newer
// request took its slot) and rejects it; then it sends the next. A request
// the listener refuses as busy is sent again, after busyPause.
type stallFlood struct {
	answered    atomic.Int64 // requests the listener replied to
	givenUp     atomic.Int64 // replied requests the listener then gave up
	refusedBusy atomic.Int64 // requests refused as busy
	progress    chan struct{}
	stop        chan struct{}
	stopOnce    sync.Once
	wg          sync.WaitGroup
	errs        chan error
	t           *testing.T
}

// startStallFlood floods target from pair.Client with flooders side by side
// until requests have been answered, or stopNow.
func startStallFlood(t *testing.T, ctx context.Context, pair rdmatest.Pair, target netip.AddrPort, flooders int, requests int64, busyPause time.Duration) *stallFlood {
	f := &stallFlood{progress: make(chan struct{}, 1), stop: make(chan struct{}), errs: make(chan error, flooders), t: t}
	private := encode(ring.ConnData{
		Version: 1, Flags: ring.FlagIOMap, Credits: 16,
		TargetSGL: ring.RemoteSGE{Addr: 0x10000, Key: 7, Length: 2},
		DataBuf:   ring.RemoteSGE{Addr: 0x20000, Key: 7, Length: 1 << 16},
	})
	var claimed, qpns atomic.Int64
	// stall sends one request; answered is false if it was refused busy.
	stall := func() (answered bool, err error) {
		fctx, fcancel := context.WithCancel(ctx)
		defer fcancel()
		go func() {
			select {
			case <-f.stop:
				fcancel()
			case <-fctx.Done():
			}
		}()
		ch, err := cm.NewEventChannel()
		if err != nil {
			return false, err
		}
		defer ch.Close()
		id, err := ch.NewID()
		if err != nil {
			return false, err
		}
		defer id.Close() // rejects the reply if the listener has not given up yet
		if err := id.Resolve(fctx, pair.Client, target, cm.Retry{Tries: 3, Timeout: time.Second}); err != nil {
			if fctx.Err() != nil {
				return true, nil
			}
			return false, err
		}
		p := cm.RsocketConnParam(private)
		// An id without a queue pair never sends RTU. Each request names
		// a queue pair of its own, out of the range the device hands out:
		// the connection manager rejects a second request from one as
		// stale.
		p.QPNum = uint32(0x800000 + qpns.Add(1))
		if err := id.Connect(p); err != nil {
			return false, err
		}
		if _, err := id.Await(fctx, cm.EventConnectResponse); err != nil {
			switch {
			case fctx.Err() != nil:
				return true, nil
			case refusedAsBusy(explainReject(err)):
				f.refusedBusy.Add(1)
				return false, nil
			}
			return false, err
		}
		f.answered.Add(1)
		select {
		case f.progress <- struct{}{}:
		default:
		}
		_, err = id.Await(fctx, cm.EventEstablished)
		var rej *cm.RejectError
		switch {
		case fctx.Err() != nil:
			return true, nil
		case errors.As(err, &rej) && errors.Is(err, syscall.ECONNREFUSED):
			f.givenUp.Add(1)
			return true, nil
		case err == nil:
			return true, errors.New("a request that never sent RTU was established")
		}
		return true, err
	}
	for range flooders {
		f.wg.Go(func() {
			for n := claimed.Add(1); n <= requests; n = claimed.Add(1) {
				for {
					answered, err := stall()
					if err != nil {
						f.errs <- err
						f.stopOnce.Do(func() { close(f.stop) })
						return
					}
					if answered {
						break
					}
					select {
					case <-f.stop:
						return
					case <-time.After(busyPause):
					}
				}
			}
		})
	}
	return f
}

// waitAnswered waits until n stalled requests have had their reply, or the
// flood or ctx ends.
func (f *stallFlood) waitAnswered(ctx context.Context, n int64) {
	for f.answered.Load() < n {
		select {
		case <-f.progress:
		case <-f.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// stopNow ends the flood, waits for its flooders and reports their errors.
func (f *stallFlood) stopNow() {
	f.stopOnce.Do(func() { close(f.stop) })
	f.wg.Wait()
	for {
		select {
		case err := <-f.errs:
			f.t.Errorf("flood: %v", err)
		default:
			return
		}
	}
}
