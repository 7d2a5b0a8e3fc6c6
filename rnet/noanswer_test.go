package rnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
)

// silent is a step that waits for an answer that never comes: it returns
// when its context ends, with the error a connection manager wait returns
// then.
func silent(op string) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		return &cm.Error{Op: op, Addr: "10.77.0.9:7471", Err: ctx.Err()}
	}
}

// TestDialNoAnswerBound: a dial whose peer never answers fails when
// HandshakeTimeout runs out, with a *NoAnswerError that names the step,
// says the host does not answer, matches ETIMEDOUT and is a timeout, but
// not os.ErrDeadlineExceeded; a falling-back dial treats it as an RDMA
// attempt that timed out.
func TestDialNoAnswerBound(t *testing.T) {
	const bound = 150 * time.Millisecond
	for _, tc := range []struct {
		step, op, want string
	}{
		{stepAddr, "rdma_resolve_addr", "no reply to the address resolution in 150ms: the host does not answer"},
		{stepAddr, "rdma_resolve_route", "no reply to the route resolution in 150ms: the fabric does not answer"},
		{stepConnect, "rdma_get_cm_event", "no reply to the connection request in 150ms: the host does not answer"},
	} {
		start := time.Now()
		err := newAnswerBudget(bound, "10.77.0.9:7471").wait(t.Context(), tc.step, silent(tc.op))
		if took := time.Since(start); took < bound {
			t.Errorf("%s: failed after %v, before the bound %v", tc.op, took, bound)
		}
		err = dialError(t.Context(), nil, netAddr(netip.MustParseAddrPort("10.77.0.9:7471")), err)
		if got := err.Error(); got != "dial rdma 10.77.0.9:7471: "+tc.want {
			t.Errorf("%s: %q, want %q", tc.op, got, "dial rdma 10.77.0.9:7471: "+tc.want)
		}
		checkNoAnswer(t, err)
		if r, ok := fallbackReasonOf(t.Context(), err); !ok || r != FallbackTimeout {
			t.Errorf("%s: a fallback dial's reason %v (%t), want %v as for an attempt that timed out", tc.op, r, ok, FallbackTimeout)
		}
	}
}

// checkNoAnswer checks err is a dial's *NoAnswerError with the documented
// matches.
func checkNoAnswer(t *testing.T, err error) {
	t.Helper()
	var na *NoAnswerError
	var ne net.Error
	switch {
	case !errors.As(err, &na):
		t.Errorf("%v: not a *NoAnswerError", err)
	case !errors.Is(err, syscall.ETIMEDOUT):
		t.Errorf("%v: does not match ETIMEDOUT", err)
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		t.Errorf("%v: matches a deadline of the caller's", err)
	case !errors.As(err, &ne) || !ne.Timeout():
		t.Errorf("%v: Timeout() is not true", err)
	}
}

// TestDialNoAnswerSharesBound: the waits of one dial share one bound: a
// later step gets what the earlier ones left.
func TestDialNoAnswerSharesBound(t *testing.T) {
	const bound = 10 * time.Second
	b := newAnswerBudget(bound, "10.77.0.9:7471")
	if err := b.wait(t.Context(), stepAddr, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	b.spent += 4 * time.Second // as if resolving had taken that long
	var left time.Duration
	err := b.wait(t.Context(), stepConnect, func(ctx context.Context) error {
		deadline, ok := ctx.Deadline()
		if !ok {
			t.Fatal("the connect step has no deadline")
		}
		left = time.Until(deadline)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := bound - 4*time.Second; left > want || left < want-time.Second {
		t.Errorf("the connect step may wait %v more; want what the resolution left, %v", left, want)
	}

	// Spent already: the next step fails at once, saying so.
	b.spent = bound
	err = b.wait(t.Context(), stepConnect, silent("rdma_get_cm_event"))
	checkNoAnswer(t, err)
}

// TestDialNoAnswerFromCM: the connection manager giving up on a silent
// host (an address resolution that timed out, an UNREACHABLE event) is a
// *NoAnswerError too, before the bound; what it reports for other causes
// is returned as it is.
func TestDialNoAnswerFromCM(t *testing.T) {
	unreachable := (&cm.Event{Type: cm.EventUnreachable, Status: -int(syscall.ETIMEDOUT), Addr: "10.77.0.9:7471"}).Err()
	addrTimeout := (&cm.Event{Type: cm.EventAddrError, Status: -int(syscall.ETIMEDOUT), Addr: "10.77.0.9:7471"}).Err()
	noRoute := (&cm.Event{Type: cm.EventAddrError, Status: -int(syscall.ENETUNREACH), Addr: "10.77.0.9:7471"}).Err()
	rejected := (&cm.Event{Type: cm.EventRejected, Status: cm.RejectInvalidServiceID, Addr: "10.77.0.9:7471"}).Err()
	for _, tc := range []struct {
		step  string
		err   error
		want  string // the text of a *NoAnswerError, or "" for err as it was
		cause error
	}{
		{stepConnect, unreachable, "no reply to the connection request in 0s: the host does not answer", cm.ErrUnreachable},
		{stepAddr, addrTimeout, "no reply to the address resolution in 0s: the host does not answer", syscall.ETIMEDOUT},
		{stepAddr, noRoute, "", syscall.ENETUNREACH},
		{stepConnect, rejected, "", syscall.ECONNREFUSED},
	} {
		err := newAnswerBudget(time.Hour, "10.77.0.9:7471").wait(t.Context(), tc.step, func(context.Context) error { return tc.err })
		if !errors.Is(err, tc.cause) {
			t.Errorf("%v: %v does not match %v", tc.err, err, tc.cause)
		}
		if tc.want == "" {
			if err != tc.err {
				t.Errorf("%v: returned as %v", tc.err, err)
			}
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("%v: %q, want %q", tc.err, err, tc.want)
		}
		checkNoAnswer(t, err)
	}
}

// TestDialAnswerAtTheBound: an answer that comes as the bound runs out
// (a reject, here) is returned as it is: the host did answer.
func TestDialAnswerAtTheBound(t *testing.T) {
	reject := &cm.RejectError{Addr: "10.77.0.9:7471", Status: cm.RejectInvalidServiceID}
	err := newAnswerBudget(minHandshakeTimeout, "10.77.0.9:7471").wait(t.Context(), stepConnect, func(ctx context.Context) error {
		<-ctx.Done()
		return reject
	})
	if err != reject {
		t.Errorf("got %v, want the reject", err)
	}
}

// TestDialNoAnswerCallerDeadline: a dial whose own context ends first
// fails with the caller's deadline (context.DeadlineExceeded, "i/o
// timeout", as net.Dialer's), never a *NoAnswerError; with no bound of rnet's own
// (HandshakeTimeout negative) only the context ends the wait.
func TestDialNoAnswerCallerDeadline(t *testing.T) {
	for _, bound := range []time.Duration{time.Hour, 0} {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		err := newAnswerBudget(bound, "10.77.0.9:7471").wait(ctx, stepConnect, silent("rdma_get_cm_event"))
		err = dialError(ctx, nil, nil, err)
		cancel()
		var na *NoAnswerError
		if errors.As(err, &na) || !errors.Is(err, context.DeadlineExceeded) || !strings.HasSuffix(err.Error(), "i/o timeout") {
			t.Errorf("bound %v: %v, want the caller's deadline, i/o timeout", bound, err)
		}
	}
}
