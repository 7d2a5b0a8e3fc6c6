package pollgroup

// One spinner per group: a busy-polling Step polls the group's CQ and hands
// every member what it finds, waking their waiters, so one spinning
// goroutine already watches the CQ for all of them. A second spinner would
// find nothing the first does not, and only take the CPU that the other
// members' work (and, on a small machine, the peer's) needs.

// TrySpin makes m's caller the group's spinner and reports true, unless
// another member's caller spins now: that one polls the CQ for m too, so
// m's caller should park at once instead. A true TrySpin must be followed
// by EndSpin when the spin ends.
func (m *Member) TrySpin() bool {
	if !m.g.spinner.CompareAndSwap(nil, m) {
		return false
	}
	m.spinWoke.Store(false) // a wake of an earlier spin is no news to this one
	return true
}

// EndSpin ends m's turn as the group's spinner, if it has it.
func (m *Member) EndSpin() { m.g.spinner.CompareAndSwap(m, nil) }

// Spinner reports whether some member of g spins now.
func (g *Group) Spinner() bool { return g.spinner.Load() != nil }

// SpinWokeOthers reports, once, whether m's spinning steps handed another
// member a completion that woke its waiter since the last call: the
// group's other connections have work, which needs the spinner's CPU
// more than the spin does.
func (m *Member) SpinWokeOthers() bool { return m.spinWoke.Swap(false) }
