//go:build race

package interop

// raceEnabled: the race detector slows every memory access several times
// over, so the bulk tests move less under it (see bulkSize).
const raceEnabled = true
