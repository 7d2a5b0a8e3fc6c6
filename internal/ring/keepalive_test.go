package ring_test

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// TestKeepaliveWhileStalled: a writer whose data waits for credits or
// buffer space from a peer that no longer reads has nothing in flight, and
// must still probe the peer: it is exactly the writer a dead peer strands.
func TestKeepaliveWhileStalled(t *testing.T) {
	_, a, b := newAutoPair(t, ring.Config{SendBufferSize: 4096, RecvBufferSize: 1024})
	settle(t, a, b)
	// b never reads: a fills b's rbuf and then its own sbuf, and stalls.
	if n, _ := a.eng.Write(make([]byte, 4096)); n == 0 {
		t.Fatal("nothing written")
	}
	settle(t, a, b)
	if a.eng.InFlight() != 0 || a.eng.Flushed() {
		t.Fatalf("want a stalled writer: in flight %d, flushed %v", a.eng.InFlight(), a.eng.Flushed())
	}
	a.eng.Keepalive()
	wrs := a.eng.PostSends(nil)
	if len(wrs) != 1 || wrs[0].Op != wr.OpWrite || wrs[0].NumSGE != 0 {
		t.Fatalf("stalled writer's keepalive: %+v", wrs)
	}
	if a.eng.InFlight() != 1 {
		t.Fatalf("in flight %d after the keepalive", a.eng.InFlight())
	}
}
