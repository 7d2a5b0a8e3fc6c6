package rnet

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// waitBound is how long waitUntil and waitSignalled wait before they fail
// the test: a hang in the code under test then becomes a failure that says
// what it waited for, not a stuck run killed by go test's -timeout. The
// conditions waited for take milliseconds, even under -race in the
// emulated lab; a minute is far beyond that, and the bound is cut short to
// end before the test binary's own deadline.
const waitBound = time.Minute

// waitUntil looks at cond until it holds, for a condition nothing signals
// (a counter, a field read under a lock). Between looks it sleeps, starting
// at a few microseconds and doubling up to a millisecond: a waiting test
// does not take a CPU from the goroutines it waits for, and a condition
// that comes true is seen within about a millisecond. Where the code under
// test signals the change, waitSignalled waits for the signal instead.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	bound := waitTimeout(t)
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

// waitSignalled looks at cond once, then again each time signal fires,
// until it holds: for a condition whose every change the code under test
// signals on signal (a test hook such as simQP.waiting). It never looks
// without a signal, so a signal that does not come fails the test at the
// bound rather than being covered by polling.
func waitSignalled(t testing.TB, what string, signal <-chan struct{}, cond func() bool) {
	t.Helper()
	bound := waitTimeout(t)
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

// waitTimeout is waitBound, or less if the test binary's deadline comes
// sooner: the failure must be reported before go test kills the binary.
func waitTimeout(t testing.TB) time.Duration {
	d, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return waitBound
	}
	deadline, ok := d.Deadline()
	if !ok {
		return waitBound
	}
	// Leave time to report the failure and run the cleanups.
	return max(min(waitBound, time.Until(deadline)-10*time.Second), time.Second)
}

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

func splitFields(s string) []string { return strings.Fields(s) }

func defaultSettingsLayout() ring.Layout {
	var c *Config
	return c.settings().ring.Layout()
}

// TestWaitUntilSleepsBetweenLooks: a wait for a condition that comes true
// later looks at it a few times, not in a loop that keeps a CPU busy. After
// the doubling pauses reach a millisecond, looks are at least that far
// apart (a timer never fires early), whatever the machine's speed.
func TestWaitUntilSleepsBetweenLooks(t *testing.T) {
	done := make(chan struct{})
	time.AfterFunc(20*time.Millisecond, func() { close(done) })
	looks := 0
	start := time.Now()
	waitUntil(t, "the timer", func() bool {
		looks++
		return isClosed(done)
	})
	elapsed := time.Since(start)
	// 4 µs doubled to 1 ms is nine pauses, then one look per millisecond,
	// and one look before the first pause.
	if most := 10 + int(elapsed/time.Millisecond) + 1; looks > most {
		t.Errorf("waitUntil looked %d times in %v, want at most %d", looks, elapsed, most)
	}
}
