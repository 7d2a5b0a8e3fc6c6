package rnet

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/rnet-dev/rnet/internal/cm"
)

// TestDialRetriesBusyRejects: a dial refused by a busy listener tries
// again until it connects; one refused for another reason does not; one
// whose context would end before its next try returns the busy reject,
// and one whose context ends while it waits returns the context's error.
func TestDialRetriesBusyRejects(t *testing.T) {
	busy := func(ctx context.Context) error {
		return rejectedBy(ctx, "10.77.0.2:7471", cm.RejectConsumer, rnetReject(rejectPendingFull))
	}
	// dialer fails the first fails calls with fail's error, then connects
	// (with a nil *Conn, which the retry does not look at).
	dialer := func(fails int, fail func(context.Context) error) (func(context.Context) (*Conn, error), *int) {
		calls := new(int)
		return func(ctx context.Context) (*Conn, error) {
			*calls++
			if *calls <= fails {
				return nil, fail(ctx)
			}
			return nil, nil
		}, calls
	}

	once, calls := dialer(3, busy)
	if _, err := dialRetryingBusy(t.Context(), once); err != nil || *calls != 4 {
		t.Errorf("three busy rejects, then a connect: %v after %d tries, want it connected after 4", err, *calls)
	}

	once, calls = dialer(3, func(ctx context.Context) error {
		return rejectedBy(ctx, "10.77.0.2:7471", cm.RejectConsumer, rnetReject(rejectLockedMemory))
	})
	if _, err := dialRetryingBusy(t.Context(), once); !errors.Is(err, syscall.ECONNREFUSED) || refusedAsBusy(err) || *calls != 1 {
		t.Errorf("a reject for want of memory: %v after %d tries, want it returned after 1", err, *calls)
	}

	// A deadline nearer than the shortest wait (or passed already, on a
	// slow machine): the busy reject, at once. The reject itself came
	// before the deadline, so it is made without it.
	ctx, cancel := context.WithTimeout(t.Context(), busyRetryFirst/4)
	defer cancel()
	once, calls = dialer(1000, func(context.Context) error { return busy(context.Background()) })
	if _, err := dialRetryingBusy(ctx, once); !refusedAsBusy(err) || *calls != 1 {
		t.Errorf("busy with a deadline nearer than the next try: %v after %d tries, want the busy reject after 1", err, *calls)
	}

	// Cancelled while waiting to try again: the context's error.
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	once, calls = dialer(1000, func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			return dialError(ctx, nil, nil, err) // as dial fails once its context ended
		}
		cancel()
		return busy(ctx)
	})
	if _, err := dialRetryingBusy(ctx, once); !errors.Is(err, context.Canceled) || refusedAsBusy(err) {
		t.Errorf("cancelled while waiting to try again: %v after %d tries, want context.Canceled", err, *calls)
	}
}
