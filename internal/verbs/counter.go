package verbs

import "sync/atomic"

var cgoCalls atomic.Uint64

// CgoCalls is the number of crossings from Go into libibverbs or librdmacm
// made by internal/verbs and internal/cm since the process started.
// Benchmarks divide it by the work done to see the cost of batching.
func CgoCalls() uint64 { return cgoCalls.Load() }

// CountCgoCall records one crossing. internal/cm calls it for its own calls
// so that one counter covers both packages.
func CountCgoCall() { cgoCalls.Add(1) }
