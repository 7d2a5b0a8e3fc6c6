package stream

import (
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// Test hooks of the package, each set only by tests.

// testHookAddRegion, set before any connection exists, fails the
// registration of a ring's new region, as a locked-memory limit would.
var testHookAddRegion func(kind ring.RegionKind, size int) error

// testHookNow, set before any connection exists, replaces the keepalive's
// clock, so that a test can make its ticks come late.
var testHookNow func() time.Time

// keepaliveNow is the keepalive's clock.
func keepaliveNow() time.Time {
	if testHookNow != nil {
		return testHookNow()
	}
	return time.Now()
}
