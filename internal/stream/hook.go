package stream

import "github.com/rnet-dev/rnet/internal/ring"

// Test hooks of the package, each set only by tests.

// testHookAddRegion, set before any connection exists, fails the
// registration of a ring's new region, as a locked-memory limit would.
var testHookAddRegion func(kind ring.RegionKind, size int) error
