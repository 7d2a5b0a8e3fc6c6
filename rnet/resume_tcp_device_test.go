//go:build linux && cgo

package rnet

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// TestRXEResumeOverTCP: a connection dialled with Config.Resume and
// TCPFallback to a DualListener, whose queue pair fails mid-stream when no
// RDMA path is left (the hook leaves the resume no RDMA address), resumes
// over TCP to the listener's port: every byte of a pattern stream each way
// arrives once, in order, and both ends say they run over TCP. When that
// path fails in turn, with RDMA back, the stream returns to RDMA. Nothing
// is left behind after Close. The two-host lab's TestRXEResumeOverTCP cuts
// RoCE on the wires instead.
func TestRXEResumeOverTCP(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	cfg := &Config{Resume: true, ResumeTimeout: 20 * time.Second}
	dl, err := (&ListenConfig{Config: cfg}).ListenDual(t.Context(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := dl.Accept() // ends with the listener
		accepted <- c
	}()
	d := &Dialer{Config: cfg, LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, Timeout: time.Minute, TCPFallback: true}
	c, err := d.Dial("rdma", netip.AddrPortFrom(pair.Server, dl.Addr().(*Addr).Port()).String())
	if err != nil {
		dl.Close()
		<-accepted
		t.Fatal(err)
	}
	sc, ok := (<-accepted).(*Conn)
	if !ok {
		t.Fatal("Accept did not return the RDMA connection")
	}
	noRDMA := func([]netip.AddrPort) []netip.AddrPort { return nil }
	testHookResumeCandidates.Store(&noRDMA)
	defer testHookResumeCandidates.Store(nil)

	// Each round fails the path mid-stream with cut; then both ends run
	// over transport, having resumed resumes times.
	round := func(name string, cut func(), transport string, resumes uint64) {
		t.Helper()
		const total, at = 8 << 20, 1 << 20
		start := time.Now()
		var cutAt time.Time
		err := patternStreams(c, sc, total, at, func() {
			cutAt = time.Now()
			cut()
		})
		if err != nil {
			t.Fatalf("%s: the streams: %v", name, err)
		}
		if cutAt.IsZero() {
			t.Fatalf("%s: the streams ended before the cut", name)
		}
		t.Logf("%s after %v: dialer %+v", name, cutAt.Sub(start), c.conn.Stats().Resume)
		for end, conn := range map[string]*Conn{"dialer": c, "listener": sc} {
			info, err := conn.Info()
			if err != nil {
				t.Fatalf("%s: %s: Info: %v", name, end, err)
			}
			if info.Transport != transport {
				t.Errorf("%s: %s: Info().Transport = %q, want %s", name, end, info.Transport, transport)
			}
			if st := conn.Stats(); st.Resumes != resumes {
				t.Errorf("%s: %s: Stats().Resumes = %d, want %d", name, end, st.Resumes, resumes)
			}
		}
	}
	round("the RDMA path failed, none left", func() {
		if err := failQueuePair(c); err != nil {
			t.Errorf("fail the dialer's queue pair: %v", err)
		}
	}, "TCP", 1)
	// The TCP path fails too, and RDMA is back: the stream returns to it.
	testHookResumeCandidates.Store(nil)
	round("the TCP path failed, RDMA back", func() {
		c.conn.PathFailed(errors.New("rnet test: the TCP path is given up"))
	}, "RoCE", 2)
	if rdma, tcp := dl.Accepted(); rdma != 1 || tcp != 0 {
		t.Errorf("Accepted() = %d over RDMA, %d over TCP; the resume is no new connection", rdma, tcp)
	}
	c.Close()
	sc.Close()
	dl.Close()
	checkReleased(t, gor0, fds0, res0)
}
