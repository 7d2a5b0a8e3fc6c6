package stream

import (
	"fmt"
	"testing"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/ring"
)

// A connection whose larger regions cannot be registered goes on at its
// first size.
func TestSimRingsRegistrationRefused(t *testing.T) {
	testHookAddRegion = func(kind ring.RegionKind, size int) error {
		return fmt.Errorf("refused %v region of %d bytes", kind, size)
	}
	defer func() { testHookAddRegion = nil }()
	a, b := simPipe(t, nil)
	defer a.Close()
	defer b.Close()
	conntest.StreamChecked(t, a, b, 4<<20, 64<<10, 64<<10, 3)
	sa, sb := a.Stats(), b.Stats()
	if sa.SendRingSize != ring.DefaultIdleBufSize || sb.RecvRingSize != ring.DefaultIdleBufSize {
		t.Fatalf("rings moved: send %d receive %d", sa.SendRingSize, sb.RecvRingSize)
	}
	if sa.Engine.RegionsDeclined == 0 || sb.Engine.RegionsDeclined == 0 {
		t.Fatalf("declined: writer %d reader %d", sa.Engine.RegionsDeclined, sb.Engine.RegionsDeclined)
	}
}
