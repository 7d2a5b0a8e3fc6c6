//go:build linux && cgo

package rnet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/rnet-dev/rnet/internal/pollgroup"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// TestRXEPollGroupShared: connections on one device share one split CQ
// (two verbs CQs: receives and sends), and the last one to close frees it.
func TestRXEPollGroupShared(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	dialed, accepted := openPairs(t, pair, ln, n)
	// The dialled ends are on one device and the accepted ends on the
	// other (or on the same one, when the lab has a single device): one
	// group each holds them all, with the default queue sizes.
	groups := pollgroup.Count()
	if groups < 1 || groups > 2 {
		t.Errorf("%d connections (%d ends) are in %d poll groups, want 1 per device", n, 2*n, groups)
	}
	// At most: a CQ that an earlier test's leftovers release meanwhile
	// can only lower the count.
	if cqs := procstat.Resources(t)["cq"] - res0["cq"]; cqs > 2*groups {
		t.Errorf("%d connections hold %d CQs, want at most %d: one split CQ per poll group", n, cqs, 2*groups)
	}
	for i := range dialed {
		roundTripOnce(t, dialed[i], accepted[i])
		roundTripOnce(t, accepted[i], dialed[i])
	}
	closeAll(dialed, accepted)
	ln.Close()
	checkReleased(t, gor0, fds0, res0)
	if groups := pollgroup.Count(); groups != 0 {
		t.Errorf("%d poll groups left after every connection closed, want 0", groups)
	}
}

// TestRXEPollGroupMembersFailOneByOne: the queue pairs of a group's
// connections go to the error state one at a time while the others
// stream: each failed connection's writer gets an error, and every other
// connection delivers every byte, in order, and finishes.
func TestRXEPollGroupMembersFailOneByOne(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	const n, failing = 8, 4
	total := 16 << 20
	if testing.Short() {
		total = 4 << 20
	}
	dialed, accepted := openPairs(t, pair, ln, n)
	type result struct {
		writeErr, readErr error
		read              int
	}
	results := make([]result, n)
	progressed := make([]chan struct{}, n) // closed once the reader has some bytes
	var wg sync.WaitGroup
	for i := range n {
		progressed[i] = make(chan struct{})
		limit := total
		if i < failing {
			limit = -1 // until the queue pair fails
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			results[i].writeErr = writePattern(dialed[i], i, limit)
			if results[i].writeErr == nil {
				dialed[i].CloseWrite()
			}
		}()
		go func() {
			defer wg.Done()
			results[i].read, results[i].readErr = readPattern(accepted[i], i, progressed[i])
		}()
	}
	for i := range failing {
		<-progressed[i]
		q := dialed[i].conn.QueuePair().(*verbsQP)
		if err := q.qp.SetError(); err != nil {
			t.Fatalf("connection %d: move the queue pair to error: %v", i, err)
		}
		// Our Close tells the peer, whose reader then ends.
		dialed[i].Close()
	}
	wg.Wait()
	for i, r := range results {
		switch {
		case i < failing && r.writeErr == nil:
			t.Errorf("connection %d: its queue pair failed, yet its writer saw no error", i)
		case i < failing && errors.Is(r.readErr, errPatternBroken):
			t.Errorf("connection %d (failed): %v", i, r.readErr)
		case i >= failing && (r.writeErr != nil || r.readErr != nil || r.read != total):
			t.Errorf("connection %d: write %v, read %d of %d bytes, %v", i, r.writeErr, r.read, total, r.readErr)
		}
	}
	closeAll(dialed, accepted)
	ln.Close()
	checkReleased(t, gor0, fds0, res0)
}

var errPatternBroken = errors.New("a byte differs from what was written")

// patternByte is byte j of connection i's stream.
func patternByte(i, j int) byte { return byte((j*131 + i*17 + j>>9) % 251) }

// writePattern writes connection i's stream, limit bytes of it or, with a
// negative limit, until a Write fails.
func writePattern(c net.Conn, i, limit int) error {
	buf := make([]byte, 64<<10)
	for off := 0; limit < 0 || off < limit; {
		k := len(buf)
		if limit >= 0 {
			k = min(k, limit-off)
		}
		for j := range k {
			buf[j] = patternByte(i, off+j)
		}
		if _, err := c.Write(buf[:k]); err != nil {
			return err
		}
		off += k
	}
	return nil
}

// readPattern reads connection i's stream to its end, checking every
// byte, and closes progressed after the first bytes.
func readPattern(c net.Conn, i int, progressed chan struct{}) (int, error) {
	buf := make([]byte, 64<<10)
	off := 0
	for {
		k, err := c.Read(buf)
		for j := range k {
			if buf[j] != patternByte(i, off+j) {
				return off + j, fmt.Errorf("%w: byte %d", errPatternBroken, off+j)
			}
		}
		if off == 0 && k > 0 {
			close(progressed)
		}
		off += k
		if err == io.EOF {
			return off, nil
		}
		if err != nil {
			if off == 0 {
				close(progressed)
			}
			return off, err
		}
	}
}
