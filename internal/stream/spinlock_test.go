//go:build rnet_lockcount

package stream

import (
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"
)

// A spin whose first round finds what it waits for takes the connection's
// lock once: finding the queue pair it spins on takes none (go test -tags
// rnet_lockcount).
func TestBusyPollLocksOncePerRound(t *testing.T) {
	a, b := simPipe(t, nil)
	defer a.Close()
	defer b.Close()
	if _, err := b.Write([]byte("ready")); err != nil {
		t.Fatal(err)
	}
	ready := func() bool { return a.eng.ReadableBytes() > 0 }
	before := lockcount.Taken()
	a.busyPoll(time.Second, ready, nil, false)
	if n := lockcount.Taken() - before; n != 1 {
		t.Fatalf("a spin of one round took %d locks, want 1", n)
	}
}
