package rnet

import (
	"net"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// queuePair is one connection's queue pair, completion queue and the
// wakeups from both, as a conn drives them: verbsQP on a device, and the
// simulated fabric's in tests. Calls to step are serialised by the conn;
// wait has at most one caller at a time (the owner of the completion
// channel wait, see wait.go); the rest may be called from any goroutine.
type queuePair interface {
	// Step does what flags ask (take the event that woke wait, arm the
	// CQ), posts recvs, then sends, then polls up to len(out) completions,
	// polling again while none came up to tries polls: one crossing into C.
	Step(flags verbs.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error)
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
	// Start delivers the connection manager's events to h, until shutdown.
	Start(h eventHandler)
	// Disconnect moves the queue pair to the error state and tells the peer.
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

// eventHandler receives connection events from the transport.
type eventHandler interface {
	// TransportDisconnected: the peer (or the network) ended the connection.
	TransportDisconnected()
	// TransportFailed: the connection cannot go on (err says why).
	TransportFailed(err error)
}
