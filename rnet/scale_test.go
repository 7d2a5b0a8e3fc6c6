//go:build linux && cgo

package rnet

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// TestRXEIdleConnsThreads holds 1000 idle connections (2000 Conns, both ends
// in this process) and checks that their waiting goroutines are parked in the
// netpoller rather than each holding an OS thread.
func TestRXEIdleConnsThreads(t *testing.T) {
	pair := rdmatest.Require(t)
	conns := 1000
	if testing.Short() {
		conns = 100
	}
	ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Accept until the listener closes: if a dial fails, the test must
	// fail with that error rather than wait for an accept that never comes.
	acceptCh := make(chan *Conn, conns)
	var acceptWG sync.WaitGroup
	acceptWG.Add(1)
	go func() {
		defer acceptWG.Done()
		for {
			c, err := ln.AcceptRDMA()
			if err != nil {
				return
			}
			acceptCh <- c
		}
	}()
	var accepted []*Conn
	d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, Timeout: time.Minute}
	dialed := make([]*Conn, conns)
	dialErrs := make([]error, conns)
	// A few dials at a time: handshakes overlap, as under a real load.
	sem := make(chan struct{}, 8)
	var dialWG sync.WaitGroup
	for i := range dialed {
		sem <- struct{}{}
		dialWG.Add(1)
		go func() {
			defer dialWG.Done()
			defer func() { <-sem }()
			dialed[i], dialErrs[i] = d.Dial("rdma", ln.Addr().String())
		}()
	}
	dialWG.Wait()
	defer func() {
		var cw sync.WaitGroup
		all := append(dialed, accepted...)
		for _, c := range all {
			if c != nil {
				cw.Add(1)
				go func() { defer cw.Done(); c.Close() }()
			}
		}
		cw.Wait()
	}()
	if err := errors.Join(dialErrs...); err != nil {
		ln.Close()
		acceptWG.Wait()
		t.Fatalf("dial: %v", err)
	}
	// Every dial that returned was accepted by the listener's handshake;
	// wait until Accept has handed them all over.
	for range conns {
		accepted = append(accepted, <-acceptCh)
	}
	ln.Close()
	acceptWG.Wait()
	threads := procstat.OSThreads(t)
	t.Logf("%d idle connections (%d Conns in this process): %d OS threads", conns, 2*conns, threads)
	if threads > procstat.ThreadLimit() {
		t.Errorf("%d OS threads for %d idle connections, want at most %d", threads, conns, procstat.ThreadLimit())
	}
	l := defaultSettingsLayout()
	t.Logf("registered (pinned) memory per connection end with the default Config: %d bytes (send %d, receive %d, target %d)",
		l.SendRegion+l.RecvRegion+l.TargetRegion, l.SendRegion, l.RecvRegion, l.TargetRegion)
}
