//go:build race

package faults

// raceEnabled: the race detector slows every memory access several times
// over, so the volume tests run shorter under it (see fullLength).
const raceEnabled = true
