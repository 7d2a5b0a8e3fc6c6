package rnet

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
)

// NoAnswerError is a Dial to a host that does not answer: nothing replied
// to the resolution of its address on the local network (ARP or neighbour
// discovery) or to the connection request, within Config.HandshakeTimeout
// or the connection manager's own retries. The host is down, frozen, or cut
// off from this one; a host that is up and has nothing listening refuses
// the request instead, at once.
//
// errors.Is matches syscall.ETIMEDOUT (so that a falling-back dial treats it
// as it treats an RDMA attempt that timed out) and Timeout reports true. It
// does not match os.ErrDeadlineExceeded or context.DeadlineExceeded: those
// say that the dial's own context or deadline ran out first, whatever the
// host did.
type NoAnswerError struct {
	Addr string        // the address dialled, host:port
	Step string        // what went unanswered: "address resolution", "route resolution" or "connection request"
	Wait time.Duration // how long the dial waited for an answer
	// Err is the cause: syscall.ETIMEDOUT when HandshakeTimeout ran out,
	// else the connection manager's error (an ADDR_ERROR or UNREACHABLE
	// event).
	Err error
}

// The steps of a dial that wait on the network, as NoAnswerError names them.
const (
	stepAddr    = "address resolution"
	stepRoute   = "route resolution"
	stepConnect = "connection request"
)

func (e *NoAnswerError) Error() string {
	who := "the host does not answer"
	if e.Step == stepRoute {
		// A route is resolved by this host, or on InfiniBand by asking the
		// subnet manager: the peer has no part in it.
		who = "the fabric does not answer"
	}
	return "no reply to the " + e.Step + " in " + e.Wait.String() + ": " + who
}

func (e *NoAnswerError) Unwrap() error { return e.Err }

// Timeout reports true: the dial gave up waiting.
func (e *NoAnswerError) Timeout() bool { return true }

// errAnswerBound is the cause of an answerBudget's context that ran out.
var errAnswerBound = errors.New("rnet: Config.HandshakeTimeout ran out")

// answerBudget is Config.HandshakeTimeout on the dialling side: the most a
// dial waits, in all, for the network to answer it (its address's and
// route's resolution, and the reply to its connection request), so that a
// dial to a host that is gone fails in a bounded time whatever the
// caller's context allows. The local work between the waits is not
// counted. One dial's, used by one goroutine.
type answerBudget struct {
	bound time.Duration // 0: no bound of rnet's own
	spent time.Duration // waited so far
	addr  string        // the address dialled, for errors
}

func newAnswerBudget(bound time.Duration, addr string) *answerBudget {
	return &answerBudget{bound: bound, addr: addr}
}

// wait runs f, a step that waits for the network, under ctx cut short to
// what is left of the budget, and counts the time it took. It returns f's
// error, or a *NoAnswerError when the budget ran out or the connection
// manager gave up on a silent host; a step that ended with ctx returns f's
// error for dialError to explain.
func (b *answerBudget) wait(ctx context.Context, step string, f func(context.Context) error) error {
	start := time.Now()
	stepCtx, cancel := ctx, context.CancelFunc(func() {})
	if b.bound > 0 {
		stepCtx, cancel = context.WithTimeoutCause(ctx, max(b.bound-b.spent, 0), errAnswerBound)
	}
	err := f(stepCtx)
	cancel()
	b.spent += time.Since(start)
	if err == nil || ctx.Err() != nil {
		return err
	}
	step = resolveStep(step, err)
	if errors.Is(err, context.DeadlineExceeded) && context.Cause(stepCtx) == errAnswerBound {
		return &NoAnswerError{Addr: b.addr, Step: step, Wait: b.bound, Err: syscall.ETIMEDOUT}
	}
	if unanswered(err) {
		return &NoAnswerError{Addr: b.addr, Step: step, Wait: b.spent.Round(100 * time.Millisecond), Err: err}
	}
	return err
}

// resolveStep tells the two steps of a resolution apart by the call that
// failed.
func resolveStep(step string, err error) string {
	var ce *cm.Error
	if step == stepAddr && errors.As(err, &ce) && ce.Op == "rdma_resolve_route" {
		return stepRoute
	}
	return step
}

// unanswered reports whether err is the connection manager giving up on a
// silent host: an address resolution that timed out (no reply to ARP or
// neighbour discovery), or an UNREACHABLE event for the connection request
// (no reply within its retries).
func unanswered(err error) bool {
	var ce *cm.Error
	if !errors.As(err, &ce) || !errors.Is(err, syscall.ETIMEDOUT) {
		return false
	}
	return errors.Is(err, cm.ErrUnreachable) || ce.Op == "rdma_resolve_addr" || ce.Op == "rdma_resolve_route"
}
