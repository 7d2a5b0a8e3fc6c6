//go:build linux && cgo

package interop

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/rnet"
)

// TestPreloadCSenderGrowsRnetRing: socat under librspreload streams into an
// rnet listener whose receive ring starts at 16 KiB. The C sender writes
// wherever each grant points, so the ring grows to its maximum under it;
// after two quiet keepalive ticks the next grant comes from a small ring
// again. Every byte is checked.
func TestPreloadCSenderGrowsRnetRing(t *testing.T) {
	pair := rdmatest.Require(t)
	socat := need(t, "socat")
	env := preloadEnv(t)
	ln, ap := listen(t, pair.Server, &rnet.Config{KeepAlive: time.Second})
	const bulk, trickle = 32 << 20, 1 << 20
	data := randomBytes(7, bulk+trickle)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	peer := startWith(t, 10*time.Minute, env, pr, devNull, socat, socatArgs(pair, ap.Port())...)
	pr.Close() // socat has its own copy
	c := accept(t, ln, peer)
	defer c.Close()
	c.SetDeadline(time.Now().Add(connDeadline))

	more := make(chan struct{})
	werr := make(chan error, 1)
	go func() {
		_, err := pw.Write(data[:bulk])
		if err == nil {
			<-more
			for off := bulk; off < len(data) && err == nil; off += 4096 {
				_, err = pw.Write(data[off:min(off+4096, len(data))])
			}
		}
		pw.Close()
		werr <- err
	}()
	readChecked := func(from, to int) {
		t.Helper()
		got := make([]byte, to-from)
		if n, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("reading C's bytes %d to %d: %d, then %v; %+v; socat:\n%s", from, to, n, err, c.Stats(), peer.out.String())
		}
		if !bytes.Equal(got, data[from:to]) {
			t.Fatalf("C's bytes %d to %d differ", from, to)
		}
	}

	readChecked(0, bulk)
	s := c.Stats()
	t.Logf("after %d MiB: receive ring %d, %d growths", bulk>>20, s.RecvRingSize, s.RingGrowths)
	if s.RecvRingSize != 128<<10 || s.RingGrowths == 0 {
		t.Fatalf("the receive ring did not grow under the C sender: %+v", s)
	}
	// Two ticks with nothing received in between: the second finds the
	// connection quiet, and the ring's next grant comes from a small one.
	ka := s.KeepalivesSent
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(time.Minute)
	for c.Stats().KeepalivesSent < ka+2 {
		select {
		case <-tick.C:
		case <-peer.done:
			t.Fatalf("socat exited: %v\n%s", peer.err, peer.out.String())
		case <-giveUp:
			t.Fatalf("still waiting after a minute for two keepalive ticks: %+v", c.Stats())
		}
	}
	shrinks := c.Stats().RingShrinks
	close(more)
	readChecked(bulk, len(data))
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	s = c.Stats()
	t.Logf("after the trickle: receive ring %d, %d shrinks, %d growths", s.RecvRingSize, s.RingShrinks, s.RingGrowths)
	if s.RingShrinks <= shrinks {
		t.Fatalf("the receive ring did not shrink once quiet: %+v", s)
	}
	// The stream's end (socat's shutdown once its stdin ends) is covered
	// by TestPreloadBulkCShutdownFirst; the test cleanup ends socat.
}
