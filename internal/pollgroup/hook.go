package pollgroup

import (
	"sync/atomic"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Hooks observe poll groups, for tests only (this package's and rnet's
// device tests); a nil field is skipped. Each is called from the goroutine
// doing the work, and may block it.
type Hooks struct {
	// Crossed is called after each crossing a member's Step makes.
	Crossed func(m *Member)
	// Polled is called after each poll of a group's CQ that the group
	// makes itself (its leader's, or a collection's), with the flags it
	// did and the completions it found, with pollMu held.
	Polled func(g *Group, flags verbs.StepFlags, found []wr.Completion)
	// Parking is called each time a member's Wait is about to park.
	Parking func(m *Member)
	// BetweenDrains is called with pollMu free between two drains of a
	// collection (see collectPastLocked), so that a test can make other
	// goroutines take the lock there rather than hope the scheduler does.
	BetweenDrains func(g *Group)
}

var testHooks atomic.Pointer[Hooks]

// SetTestHooks makes h observe every poll group until the returned
// function is called. Only tests call it, one at a time.
func SetTestHooks(h *Hooks) (restore func()) {
	old := testHooks.Swap(h)
	return func() { testHooks.Store(old) }
}

// noteCrossing tells the Crossed hook that m's Step crossed into C.
func (m *Member) noteCrossing() {
	if hooks := testHooks.Load(); hooks != nil && hooks.Crossed != nil {
		hooks.Crossed(m)
	}
}

// InGroup reports whether m is a member of g, for hooks that watch one
// connection's group.
func (m *Member) InGroup(g *Group) bool { return m.g == g }
