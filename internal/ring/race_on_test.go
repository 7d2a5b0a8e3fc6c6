//go:build race

package ring_test

// raceEnabled trims the slowest tests under the race detector.
const raceEnabled = true
