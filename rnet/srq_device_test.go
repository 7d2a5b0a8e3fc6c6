//go:build linux && cgo

package rnet

import (
	"net"
	"sync"
	"testing"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/pollgroup"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/ring"
)

// sharesReceiveQueue reports whether c's queue pair takes its receives from
// its poll group's shared receive queue, checking that its queue pair then
// has no receive queue of its own.
func sharesReceiveQueue(t *testing.T, c *Conn) bool {
	t.Helper()
	q := c.conn.QueuePair().(*verbsQP)
	shared := q.member.SRQ() != nil
	if shared != (q.qp.SRQ() != nil) {
		t.Fatalf("the group has a shared receive queue: %v; the queue pair is on one: %v", shared, q.qp.SRQ() != nil)
	}
	if shared && q.qp.Caps().MaxRecvWR != 0 {
		t.Errorf("a queue pair on the shared receive queue has a receive queue of %d", q.qp.Caps().MaxRecvWR)
	}
	return shared
}

// writeSmall writes n messages of size bytes of connection i's pattern,
// from offset off.
func writeSmall(c net.Conn, i, off, n, size int) error {
	buf := make([]byte, size)
	for k := range n {
		for j := range buf {
			buf[j] = patternByte(i, off+k*size+j)
		}
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// TestRXESharedReceiveQueue: on rxe the connections of a poll group take
// their receives from one shared receive queue, freed with the group. A
// connection starts with a small credit window and widens it once its
// peer has used it up, and every byte arrives in order. With an RNR retry
// count below 7 the connections keep receive queues of their own.
func TestRXESharedReceiveQueue(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	dialed, accepted := openPairs(t, pair, ln, n)
	for i := range n {
		if !sharesReceiveQueue(t, dialed[i]) || !sharesReceiveQueue(t, accepted[i]) {
			t.Fatalf("connection %d does not use a shared receive queue on rxe", i)
		}
	}
	if srqs, groups := procstat.Resources(t)["srq"]-res0["srq"], pollgroup.Count(); srqs < 1 || srqs > groups {
		t.Errorf("%d connections hold %d shared receive queues in %d poll groups, want one per group", n, srqs, groups)
	}

	// Messages the reader does not read use up the first window.
	const size, first = 16, 200
	if err := writeSmall(dialed[0], 0, 0, first, size); err != nil {
		t.Fatal(err)
	}
	conntest.Until(t, "the peer to receive its first credit window", func() bool {
		return accepted[0].Stats().MessagesReceived >= ring.FirstSharedCredits
	})
	if g := accepted[0].Stats().CreditWindowGrowths; g == 0 {
		t.Error("the credit window did not grow when the peer used it up")
	}
	total := first * size
	if !testing.Short() {
		total = (first + 20000) * size
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var werr error
	go func() {
		defer wg.Done()
		werr = writeSmall(dialed[0], 0, first*size, total/size-first, size)
		if werr == nil {
			werr = dialed[0].CloseWrite()
		}
	}()
	got, rerr := readPattern(accepted[0], 0, make(chan struct{}))
	wg.Wait()
	if werr != nil || rerr != nil || got != total {
		t.Errorf("write %v; read %d of %d bytes, %v", werr, got, total, rerr)
	}
	t.Logf("after %d messages of %d bytes: %+v", total/size, size, accepted[0].Stats())
	closeAll(dialed, accepted)

	// The fallback: receive queues of their own, in groups without one.
	cfg := &Config{RNRRetryCount: 6}
	c, s := connectConfigs(t, pair, cfg, cfg)
	if sharesReceiveQueue(t, c) || sharesReceiveQueue(t, s) {
		t.Error("a connection with RNRRetryCount 6 uses a shared receive queue")
	}
	roundTripOnce(t, c, s)
	roundTripOnce(t, s, c)
	c.Close()
	s.Close()
	ln.Close()
	checkReleased(t, gor0, fds0, res0)
	if groups := pollgroup.Count(); groups != 0 {
		t.Errorf("%d poll groups left after every connection closed, want 0", groups)
	}
}
