//go:build race

package twohosts

// raceEnabled: the roles on the hosts are this binary, so they run under
// the race detector too.
const raceEnabled = true
