package pollgroup

import (
	"errors"
	"net"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// A member's inbox: the completions handed to it, and what its waiter
// looks at.

// deliver appends one completion to the inbox and wakes the waiter if it
// is the first since the inbox was last emptied that the waiter needs: a
// receive (the peer's message), an error, or a send's completion while m
// needs those (see Member.NeedSends). byOther says another goroutine than
// m's own polled it. woke says it woke the waiter.
func (m *Member) deliver(wc *wr.Completion, byOther bool) (woke bool) {
	m.mu.Lock()
	if m.n == len(m.inbox) && !m.growInbox() {
		// More completions than work requests posted: the device broke
		// its contract. Fail this connection alone.
		m.err = errInboxOverflow
		m.mu.Unlock()
		notify(m.wake)
		return true
	}
	m.inbox[(m.head+m.n)%len(m.inbox)] = *wc
	m.n++
	wakes := wc.ID&ring.RecvIDFlag != 0 || wc.Status != wr.WCSuccess || m.sendsWake
	first := wakes && !m.waking
	if wakes {
		m.waking = true
	}
	if first && byOther {
		m.dispatches++
	}
	m.mu.Unlock()
	if first {
		notify(m.wake)
	}
	return first
}

// inboxFirst is the inbox's first size: an idle connection has few
// completions outstanding, and a busy one grows its inbox once.
const inboxFirst = 16

// growInbox doubles the inbox, up to the member's depth. Called with mu
// held.
func (m *Member) growInbox() bool {
	if len(m.inbox) >= m.depth {
		return false
	}
	bigger := make([]wr.Completion, min(2*len(m.inbox), m.depth))
	for i := range m.n {
		bigger[i] = m.inbox[(m.head+i)%len(m.inbox)]
	}
	m.inbox, m.head = bigger, 0
	return true
}

var errInboxOverflow = errors.New("rdma: more completions than work requests posted on the queue pair")

// fail makes the member's next step return err.
func (m *Member) fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	m.mu.Unlock()
	notify(m.wake)
}

// take moves completions from the inbox into out.
func (m *Member) take(out []wr.Completion) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := 0
	for k < len(out) && m.n > 0 {
		out[k] = m.inbox[m.head]
		m.head = (m.head + 1) % len(m.inbox)
		m.n--
		k++
	}
	if m.n == 0 {
		m.waking = false
	}
	if k == 0 && m.err != nil {
		return 0, m.err
	}
	return k, nil
}

// Dispatches counts the times another goroutine (the group's leader,
// another member's step) polled completions of m's queue pair and handed
// them to its empty inbox, waking its waiter: the hand-overs a connection
// with a CQ of its own would not need.
func (m *Member) Dispatches() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dispatches
}

// wakeful reports whether m's inbox holds a completion its waiter needs.
func (m *Member) wakeful() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.waking
}

func (m *Member) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// ready reports whether Wait must return at once, and with what.
func (m *Member) ready() (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return true, net.ErrClosed
	}
	if m.waking || m.kicked || m.err != nil {
		m.kicked = false
		return true, nil
	}
	return false, nil
}

// wakeOnSends makes the completions of m's sends wake its waiter, or no
// longer; turned on, it wakes the waiter at once if the inbox holds some.
// It reports whether the inbox now holds completions the waiter needs.
func (m *Member) wakeOnSends(on bool) (waking bool) {
	m.mu.Lock()
	m.sendsWake = on
	wake := on && m.n > 0 && !m.waking
	if wake {
		m.waking = true
	}
	waking = m.waking
	m.mu.Unlock()
	if wake {
		notify(m.wake)
	}
	return waking
}

// handedSince reports, once, whether a completion was handed to m (or a
// kick came) since its wait dropped the last stale wakeup: the leader
// waits on the channel, not on m.wake, so it looks at the wakeup itself.
func (m *Member) handedSince() bool {
	select {
	case <-m.wake:
		return true
	default:
		return false
	}
}
