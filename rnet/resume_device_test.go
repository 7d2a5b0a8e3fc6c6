//go:build linux && cgo

package rnet

import (
	"errors"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// patternStreams sends total bytes of a pattern each way on a and b at
// once, checking every byte that arrives; once each reader has received
// at least at bytes, cut is called, once. It returns the first failure.
func patternStreams(a, b *Conn, total, at int, cut func()) error {
	errc := make(chan error, 4)
	var past atomic.Int32
	for i, pair := range [][2]*Conn{{a, b}, {b, a}} {
		go func() {
			buf := make([]byte, 64<<10)
			for off := 0; off < total; {
				n := min(len(buf), total-off)
				for j := range n {
					buf[j] = patternByte(i, off+j)
				}
				if _, err := pair[0].Write(buf[:n]); err != nil {
					errc <- err
					return
				}
				off += n
			}
			errc <- nil
		}()
		go func() {
			buf := make([]byte, 64<<10)
			for off := 0; off < total; {
				n, err := pair[1].Read(buf[:min(len(buf), total-off)])
				for j := range n {
					if buf[j] != patternByte(i, off+j) {
						errc <- errors.New("byte " + strconv.Itoa(off+j) + " differs")
						return
					}
				}
				if off < at && off+n >= at && past.Add(1) == 2 {
					cut()
				}
				off += n
				if err != nil {
					if err == io.EOF {
						err = io.ErrUnexpectedEOF
					}
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	var first error
	for range 4 {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// testResumeAfterQueuePairError: a connection with Config.Resume whose
// queue pair fails mid-stream, at the dialer and then at the listener,
// resumes on a new one, and every byte of a pattern stream each way
// arrives once, in order; nothing is left behind after Close.
func testResumeAfterQueuePairError(t *testing.T, pair rdmatest.Pair) {
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	cfg := &Config{Resume: true, ResumeTimeout: 20 * time.Second}
	ln, err := (&ListenConfig{Config: cfg}).Listen(t.Context(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	c, s := dialResume(t, ln, pair.Client, pair.Server, cfg)
	const total, at = 8 << 20, 1 << 20
	// On Soft-RoCE a path a resume built bears a second of silence, the
	// first path a quarter (Config.AckTimeout): each end's queue pair says.
	ackTimeouts := func(when string, exp uint8) {
		for _, end := range []struct {
			name string
			conn *Conn
		}{{"dialer", c}, {"listener", s}} {
			info, err := end.conn.Info()
			if err != nil {
				t.Fatal(err)
			}
			if want := ackTimeoutUnit << exp; onSoftRoCE(t, end.conn) && info.AckTimeout != want {
				t.Errorf("%s: the %s's queue pair has an ACK timeout of %v, want %v", when, end.name, info.AckTimeout, want)
			}
		}
	}
	ackTimeouts("before any resume", softRoCEAckTimeout)
	before := ReadMetrics().Counters
	for _, victim := range []struct {
		name string
		conn *Conn
	}{{"dialer", c}, {"listener", s}} {
		resumes := func(c *Conn) (n uint64) {
			for _, k := range c.conn.Stats().Resume.Resumes {
				n += k
			}
			return n
		}
		c0, s0 := resumes(c), resumes(s)
		start := time.Now()
		var cutAt time.Time
		err := patternStreams(c, s, total, at, func() {
			cutAt = time.Now()
			if err := failQueuePair(victim.conn); err != nil {
				t.Errorf("fail the %s's queue pair: %v", victim.name, err)
			}
		})
		if err != nil {
			t.Fatalf("%s's queue pair failed: the streams: %v", victim.name, err)
		}
		cs, ss := c.conn.Stats().Resume, s.conn.Stats().Resume
		t.Logf("%s's queue pair failed after %v: dialer %+v, listener %+v", victim.name, cutAt.Sub(start), cs, ss)
		if cutAt.IsZero() {
			t.Fatal("the streams ended before the cut")
		}
		if resumes(c) != c0+1 || resumes(s) != s0+1 {
			t.Errorf("want one more resume at each end: dialer %+v, listener %+v", cs, ss)
		}
		ackTimeouts("after the "+victim.name+"'s queue pair failed", softRoCEResumedAckTimeout)
	}
	// Both ends resumed twice, and the process's metrics counted the four.
	for _, end := range []*Conn{c, s} {
		if st := end.Stats(); st.Resumes != 2 {
			t.Errorf("Stats().Resumes = %d, want 2", st.Resumes)
		}
	}
	after := ReadMetrics().Counters
	var grew uint64
	for cause, n := range after.Resumes {
		grew += n - before.Resumes[cause]
	}
	if grew != 4 || after.ResumeFailures != before.ResumeFailures || after.ResumeTime <= before.ResumeTime {
		t.Errorf("Metrics: %d more resumes (want 4), %d more failures (want 0), resume time %v -> %v",
			grew, after.ResumeFailures-before.ResumeFailures, before.ResumeTime, after.ResumeTime)
	}
	if n := ln.l.resume.table.Len(); n != 1 {
		t.Errorf("the listener's table holds %d connections, want 1", n)
	}
	c.Close()
	s.Close()
	ln.Close()
	checkReleased(t, gor0, fds0, res0)
}

func TestRXEResumeAfterQueuePairError(t *testing.T) {
	testResumeAfterQueuePairError(t, rdmatest.Require(t))
}

func TestIWARPResumeAfterQueuePairError(t *testing.T) {
	pair := rdmatest.RequireIWARP(t)
	// siw completes the send in flight when its queue pair is moved to
	// the error state with IBV_WC_LOC_QP_OP_ERR (siw_sq_flush), which the
	// driver takes for a local fault rather than a failed path
	// (stream.isPathFailure). It cannot tell the two apart: siw's send
	// path completes a work request that failed for any reason, a bad
	// local buffer included, with the same status (siw_qp_sq_process),
	// the queue pair is in the error state after both, and flushes
	// follow both.
	t.Skip("siw reports the send in flight as a local QP operation error, not a flush, as it reports a local fault; the driver does not resume on it")
	testResumeAfterQueuePairError(t, pair)
}
