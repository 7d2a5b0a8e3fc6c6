package stream

import (
	"net"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// QueuePair is one connection's queue pair, completion queue and the
// wakeups from both, as a Conn drives them: a device's (package rnet's,
// through its poll group), and the simulated fabric's (internal/simqp).
// The Conn calls Step, Collected and CollectAll with its mu held, one call
// at a time; Wait has at most one caller at a time (the owner of the
// completion channel wait, see wait.go); the rest may be called from any
// goroutine.
type QueuePair interface {
	// Step does what flags ask (take the event that woke wait, arm the
	// CQ), posts recvs, then sends, then polls up to len(out) completions,
	// polling again while none came up to tries polls: one crossing into C.
	Step(flags wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error)
	// Collected reports that completions are waiting which step hands
	// over without polling (another member of its poll group polled them), so a
	// step that has nothing to post need not cross into C.
	Collected() bool
	// CollectAll makes sure step's next polls hand over every completion
	// that is in the CQ now: with a poll group, step may hand over what
	// was collected without polling, so a drain calls this first.
	CollectAll()
	// Wait parks the calling goroutine, never an OS thread, until the armed
	// CQ may hold a completion no step has polled, or kick is called; it
	// may wake spuriously. parked says it did not return at once. After
	// shutdown it returns net.ErrClosed.
	Wait() (parked bool, err error)
	// Kick makes the current or next wait return; it is never lost.
	Kick()
	// NeedSends says whether the connection needs the completions of its
	// sends to go on. While it does not, a queue pair may let a send's
	// completion wake no Wait (a poll group's split CQ leaves its send
	// half unarmed); the next Step still returns it. Called with mu held.
	NeedSends(need bool)
	// Start delivers the connection manager's events to h, until shutdown.
	Start(h EventHandler)
	// Disconnect moves the queue pair to the error state and tells the
	// peer; calls after the first do nothing.
	Disconnect()
	// Shutdown fails wait for good and stops event delivery; it returns
	// once no call to the handler is running.
	Shutdown()
	// Destroy frees every device resource, once nothing waits or steps.
	Destroy() error
	// AddRegion registers size bytes of new memory for a ring of the
	// engine, in the queue pair's own protection domain, with the access
	// kind needs (see ring.RegionKind).
	AddRegion(kind ring.RegionKind, size int) (ring.Region, error)
	// RemoveRegion deregisters and frees a region addRegion (or setup)
	// made, once the engine has retired it.
	RemoveRegion(r ring.Region) error
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
}

// EventHandler receives connection events from the transport: a Conn is
// one. TransportDisconnected says the peer (or the network) ended the
// connection; TransportFailed that it cannot go on, err says why.
//
// It is an alias of an interface literal, not a defined type, so that a
// queue pair can implement QueuePair without importing this package: the
// simulated fabric's (internal/simqp) does, so that this package's own
// tests can drive a Conn over it.
type EventHandler = interface {
	TransportDisconnected()
	TransportFailed(err error)
}

// DeviceReleaser is a QueuePair that can give its device resources back
// before Destroy: once its path has failed and been drained, a resuming
// connection calls ReleaseDevice before it asks for a new path, so that
// the new path's registrations do not pin memory beside the old ones and
// the failed queue pair is not kept through the resume.
type DeviceReleaser interface {
	// ReleaseDevice shuts the queue pair down and frees what it holds on
	// the device (the queue pair, its registrations, its protection
	// domain, its connection-manager id), keeping the regions' memory
	// readable until Destroy. Step and AddRegion then fail;
	// RemoveRegion and Destroy free the memory. It is idempotent.
	ReleaseDevice() error
}

// CreditClaimer is a QueuePair whose receives come from a queue shared with
// other connections: a wider credit window needs receives claimed there.
type CreditClaimer interface {
	// ClaimCredits claims up to n more receives and returns how many.
	ClaimCredits(n int) int
}

// SpinSharer is a QueuePair whose CQ other connections share (a poll
// group): a spinning step polls it for all of them and wakes their
// waiters, so only one caller of them all spins at a time, and the rest
// park at once rather than take the CPU their peers' work needs.
type SpinSharer interface {
	// TrySpin makes the caller the one spinner and reports true, or
	// reports false while another caller spins.
	TrySpin() bool
	// EndSpin ends a spin that TrySpin allowed.
	EndSpin()
	// SpinWokeOthers reports, once, whether the spinner's steps woke
	// another connection's waiter since the last call: the spin then
	// ends, since the others' work needs the CPU.
	SpinWokeOthers() bool
}

// SoftwarePoster is a QueuePair whose device is a kernel driver doing the
// adapter's work (rxe, siw).
type SoftwarePoster interface {
	// PostsInSoftware reports that a post returns only once the
	// transfer is done.
	PostsInSoftware() bool
}
