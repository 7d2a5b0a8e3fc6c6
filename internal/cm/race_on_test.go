//go:build race

package cm

// raceEnabled: the race detector's instrumentation can allocate, so
// allocation counts are only asserted without it.
const raceEnabled = true
