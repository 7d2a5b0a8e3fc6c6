//go:build linux && cgo

package rnet

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// openPairs opens n connected pairs to ln, one at a time.
func openPairs(t *testing.T, pair rdmatest.Pair, ln *Listener, n int) (dialed, accepted []*Conn) {
	t.Helper()
	d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, Timeout: time.Minute}
	for range n {
		c1, err := d.Dial("rdma", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ln.AcceptRDMA()
		if err != nil {
			c1.Close()
			t.Fatal(err)
		}
		dialed, accepted = append(dialed, c1), append(accepted, c2)
	}
	return dialed, accepted
}

func closeAll(conns ...[]*Conn) {
	for _, cs := range conns {
		for _, c := range cs {
			c.Close()
		}
	}
}

// TestRXEEstablishedConnHoldsOneFD: an established connection end holds one
// fd, its completion channel; its connection-manager events come through
// the process's shared channel. A peer's Close still reaches each one, and
// the others keep working meanwhile.
func TestRXEEstablishedConnHoldsOneFD(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	// One pair open first, so that the shared channel and the device's
	// own fds are in the baseline.
	firstD, firstA := openPairs(t, pair, ln, 1)
	base := countFDs(t)
	const n = 16
	dialed, accepted := openPairs(t, pair, ln, n)
	// At most: an fd that an earlier test's leftovers release meanwhile
	// can only lower the count, never raise it past one per end.
	if got := countFDs(t) - base; got > 2*n {
		t.Errorf("%d connections (%d ends in this process) hold %d fds, want at most %d: one per end", n, 2*n, got, 2*n)
	}
	// Close the dialled ends one by one: each accepted end reads io.EOF
	// (its DISCONNECTED came through the shared channel), and the
	// connections not yet closed still carry data.
	for i := range dialed {
		dialed[i].Close()
		if _, err := io.ReadFull(accepted[i], make([]byte, 1)); err != io.EOF {
			t.Errorf("connection %d: Read after the peer's Close = %v, want io.EOF", i, err)
		}
		accepted[i].Close()
		for j := i + 1; j < n; j++ {
			roundTripOnce(t, dialed[j], accepted[j])
		}
	}
	if fds := procstat.WaitOpenFDs(t, base); fds != base {
		t.Errorf("open fds after closing %d connections: %d, want %d", n, fds, base)
	}
	closeAll(firstD, firstA)
	ln.Close()
	checkReleased(t, gor0, fds0, res0)
}

// TestRXEConnEventsFallBack: a connection that cannot attach to the shared
// channel keeps its own, and still hears its peer's Close there.
func TestRXEConnEventsFallBack(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	var hit atomic.Int32
	hook := func(accepting bool, step string) error {
		if accepting && step == "attach events" && hit.Add(1) == 1 {
			return errors.New("injected attach failure")
		}
		return nil
	}
	testHookSetupStage.Store(&hook)
	defer testHookSetupStage.Store(nil)
	dialed, accepted := openPairs(t, pair, ln, 1)
	if hit.Load() != 1 {
		t.Fatal("the accepted connection never tried to attach")
	}
	if q := accepted[0].conn.QueuePair().(*verbsQP); q.attached || q.ch == nil {
		t.Errorf("accepted connection: attached %v, own channel %v; want its own channel", q.attached, q.ch != nil)
	}
	if q := dialed[0].conn.QueuePair().(*verbsQP); !q.attached || q.ch != nil {
		t.Errorf("dialled connection: attached %v, own channel %v; want the shared channel", q.attached, q.ch != nil)
	}
	roundTripOnce(t, dialed[0], accepted[0])
	dialed[0].Close()
	if _, err := io.ReadFull(accepted[0], make([]byte, 1)); err != io.EOF {
		t.Errorf("Read after the peer's Close = %v, want io.EOF", err)
	}
	accepted[0].Close()
	ln.Close()
	checkReleased(t, gor0, fds0, res0)
}
