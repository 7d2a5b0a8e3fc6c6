package rnet

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// A listener that is busy (its Accept backlog full, or its line of
// requests waiting for a pending-handshake slot full) refuses a request at
// once, and says so in the reject. A dial so refused tries again, as a TCP
// client resends its SYN to a full accept queue: after about
// busyRetryFirst, then twice as long each time up to busyRetryMax, each
// wait drawn at random from its upper half so that a burst of dials
// refused together does not come back together; for as long as its context
// allows, and for at most busyRetryFor. A dial whose context would end
// before its next try returns the busy reject instead, so that its caller
// (a falling-back DialConn, say) learns that the listener was busy rather
// than that time ran out.
const (
	busyRetryFirst = 10 * time.Millisecond
	busyRetryMax   = 250 * time.Millisecond
	busyRetryFor   = 10 * time.Second
)

// dialRetryingBusy calls dialOnce until it connects or fails for another
// reason than a busy listener, as above.
func dialRetryingBusy(ctx context.Context, dialOnce func(context.Context) (*Conn, error)) (*Conn, error) {
	start := time.Now()
	delay := busyRetryFirst
	for {
		c, err := dialOnce(ctx)
		if err == nil || !refusedAsBusy(err) {
			return c, err
		}
		wait := delay/2 + rand.N(delay/2+1)
		if time.Since(start)+wait > busyRetryFor {
			return nil, err
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= wait {
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			// Fails at once with the context's error, as a dial whose
			// context ended must.
			return dialOnce(ctx)
		}
		delay = min(2*delay, busyRetryMax)
	}
}

// refusedAsBusy reports whether err is a reject from an rnet listener that
// was busy.
func refusedAsBusy(err error) bool {
	var pe *peerRejectError
	return errors.As(err, &pe) && pe.reason.busy()
}
