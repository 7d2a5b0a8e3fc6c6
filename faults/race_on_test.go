//go:build race

package faults

// raceEnabled: the race detector slows every memory access several times
// over, so the soak moves less under it (see TestSoak).
const raceEnabled = true
