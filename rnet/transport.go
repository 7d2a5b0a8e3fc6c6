package rnet

import (
	"net"

	"github.com/rnet-dev/rnet/internal/ring"
)

// queuePair is one connection's hardware as the Conn drives it: a reliable-
// connected queue pair, its completion queue and the wakeups from both. The
// verbs implementation runs on real devices; tests also run Conn over the
// simulated fabric through it.
//
// Contract: post and poll calls are serialised by the Conn's mutex. At most
// one goroutine at a time calls arm and wait (the Conn's blocked caller that
// owns the completion channel). wait must park that goroutine (not an OS
// thread) until a completion may be available that no poll since the last
// armPostPoll or takePostPoll has returned, or kick is called, and then
// return nil; wakeups may be spurious. The wakeup's event is left
// for the caller's next takePostPoll, which it makes after every wait that
// returns nil. After shutdown wait returns net.ErrClosed for good. kick may be called from any goroutine at any time,
// also after release, and is never lost: a kick with no wait in progress
// makes the next wait return at once.
type queuePair interface {
	postSend(wrs []ring.SendWR) error
	postRecv(wrs []ring.RecvWR) error
	poll(out []ring.Completion) (int, error)
	// postPoll posts recvs, then sends, then polls up to len(out)
	// completions: the connection's usual step, in one crossing into C.
	postPoll(recvs []ring.RecvWR, sends []ring.SendWR, out []ring.Completion) (int, error)
	// postPollTries is postPoll that polls again while nothing completed,
	// up to tries polls, in the same crossing: a busy-polling caller's
	// round.
	postPollTries(recvs []ring.RecvWR, sends []ring.SendWR, out []ring.Completion, tries int) (int, error)
	// armPostPoll is postPoll that first asks for one wakeup of wait at
	// the next completion, in the same crossing.
	armPostPoll(recvs []ring.RecvWR, sends []ring.SendWR, out []ring.Completion) (int, error)
	// takePostPoll is postPoll that first takes the event (if any) that
	// woke wait and then arms again, in the same crossing: once armed, the
	// CQ stays armed, and every completion after a poll makes the next
	// wait return.
	takePostPoll(recvs []ring.RecvWR, sends []ring.SendWR, out []ring.Completion) (int, error)
	// wait's parked says it found nothing at first and parked.
	wait() (parked bool, err error)
	kick()
	// wakesPeer reports whether posting readies a goroutine of this
	// process directly (the simulated fabric's peer), which a spinning
	// caller must then yield to. A device's peer is woken by the kernel.
	wakesPeer() bool
	// start begins delivering connection events (the peer's disconnect, a
	// removed device) to h, from a goroutine of the queuePair's own.
	start(h eventHandler)
	// disconnect ends the connection at the transport level: the queue pair
	// goes to the error state, outstanding work is flushed, the peer is told.
	disconnect()
	// shutdown makes wait return net.ErrClosed and stops event delivery;
	// it returns once the event goroutine has exited.
	shutdown()
	// release frees every resource. It is called once, after shutdown and
	// once no goroutine waits on the completion channel or polls any more.
	release() error
	localAddr() net.Addr
	remoteAddr() net.Addr
}

// eventHandler receives connection events from the transport.
type eventHandler interface {
	// transportDisconnected: the peer (or the network) ended the connection.
	transportDisconnected()
	// transportFailed: the connection cannot go on (err says why).
	transportFailed(err error)
}
