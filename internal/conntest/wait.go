// Package conntest has what tests of connections share: waiting for a
// condition that comes true in another goroutine, with a bound that turns
// a hang into a failure saying what it waited for, and streaming checked
// bytes through a connection.
package conntest

import (
	"testing"
	"time"
)

// Bound is how long Until and Signalled wait before they fail
// the test: a hang in the code under test then becomes a failure that says
// what it waited for, not a stuck run killed by go test's -timeout. The
// conditions waited for take milliseconds, even under -race in the
// emulated lab; a minute is far beyond that, and the bound is cut short to
// end before the test binary's own deadline.
const Bound = time.Minute

// Until looks at cond until it holds, for a condition nothing signals
// (a counter, a field read under a lock). Between looks it sleeps, starting
// at a few microseconds and doubling up to a millisecond: a waiting test
// does not take a CPU from the goroutines it waits for, and a condition
// that comes true is seen within about a millisecond. Where the code under
// test signals the change, Signalled waits for the signal instead.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	bound := Timeout(t)
	timeout := time.NewTimer(bound)
	defer timeout.Stop()
	pause := 4 * time.Microsecond
	next := time.NewTimer(pause)
	defer next.Stop()
	for !cond() {
		select {
		case <-timeout.C:
			t.Fatalf("still waiting after %v for %s", bound, what)
		case <-next.C:
		}
		pause = min(2*pause, time.Millisecond)
		next.Reset(pause)
	}
}

// Signalled looks at cond once, then again each time signal fires,
// until it holds: for a condition whose every change the code under test
// signals on signal (a test hook such as simqp.QP.Waiting). It never looks
// without a signal, so a signal that does not come fails the test at the
// bound rather than being covered by polling.
func Signalled(t testing.TB, what string, signal <-chan struct{}, cond func() bool) {
	t.Helper()
	bound := Timeout(t)
	timeout := time.NewTimer(bound)
	defer timeout.Stop()
	for !cond() {
		select {
		case <-timeout.C:
			t.Fatalf("still waiting after %v for %s", bound, what)
		case <-signal:
		}
	}
}

// Timeout is Bound, or less if the test binary's deadline comes
// sooner: the failure must be reported before go test kills the binary.
func Timeout(t testing.TB) time.Duration {
	d, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return Bound
	}
	deadline, ok := d.Deadline()
	if !ok {
		return Bound
	}
	// Leave time to report the failure and run the cleanups.
	return max(min(Bound, time.Until(deadline)-10*time.Second), time.Second)
}
