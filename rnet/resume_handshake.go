package rnet

import (
	"context"
	"errors"
)

// A resume request's handshake takes no pending-handshake slot: those bound
// what strangers may make a listener pin, and a flood of new connections
// must not keep established ones from resuming. It is bounded instead per
// connection: each holds at most one resume handshake that has built
// anything (a queue pair, its rings), a newer request ends the one under
// way, and it builds only once that one has let go. A client replaying a
// token's requests thus makes the listener hold one queue pair for the
// connection at a time, and resumes in progress are bounded by the
// connections the table holds. The table takes the newer request's token
// in place of the older's, so the older could never have committed.

// errResumeReplaced ends a resume handshake that a newer request for the
// same connection replaced.
var errResumeReplaced = errors.New("rnet: a newer request to resume the connection replaced this one")

// resumeHandshake is one resume request's handshake on its connection's
// entry.
type resumeHandshake struct {
	e      *resumeEntry
	ctx    context.Context // ends when a newer request replaces this one, or with the listener
	cancel context.CancelCauseFunc

	// Under e.mu:
	holds    bool // took e.building, and has not given it back
	released bool
}

// claim starts a resume request's handshake on the connection, ending the
// one under way, if any. The handshake's work runs under its ctx.
func (e *resumeEntry) claim(parent context.Context) *resumeHandshake {
	ctx, cancel := context.WithCancelCause(parent)
	h := &resumeHandshake{e: e, ctx: ctx, cancel: cancel}
	e.mu.Lock()
	old := e.handshake
	e.handshake = h
	e.mu.Unlock()
	if old != nil {
		old.cancel(errResumeReplaced)
	}
	return h
}

// acquire waits until no other handshake of the connection holds anything
// and takes that right for this one; it returns the cause instead if this
// handshake was replaced, or the listener closed, first.
func (h *resumeHandshake) acquire() error {
	select {
	case <-h.e.building:
	case <-h.ctx.Done():
		return context.Cause(h.ctx)
	}
	h.e.mu.Lock()
	h.holds = true
	h.e.mu.Unlock()
	if h.ctx.Err() != nil {
		// Replaced as it took the right: let the newer one have it.
		h.release()
		return context.Cause(h.ctx)
	}
	return nil
}

// release records that the handshake has let go of what it built, or
// handed it to the connection. Later calls do nothing.
func (h *resumeHandshake) release() {
	e := h.e
	e.mu.Lock()
	if h.released {
		e.mu.Unlock()
		return
	}
	h.released = true
	holds := h.holds
	h.holds = false
	if e.handshake == h {
		e.handshake = nil
	}
	e.mu.Unlock()
	if holds {
		e.building <- struct{}{}
	}
	h.cancel(nil)
}

// maxResumeHandshakesFree is how many resume handshakes a listener keeps
// alive beyond two per connection in its table (see takeHandshake).
const maxResumeHandshakesFree = 16

// takeHandshake counts a new resume handshake alive, unless the listener
// has two per connection in its table and maxResumeHandshakesFree more
// already: each holds a connection manager id, an event channel and a
// goroutine, most only until a newer request for the same connection ends
// them, and a client replaying requests faster than they end must not
// grow them without bound. The caller gives it back with handshakes.Add(-1).
func (r *resumeListener) takeHandshake() bool {
	limit := 2*int64(r.table.Len()) + maxResumeHandshakesFree
	if r.handshakes.Add(1) > limit {
		r.handshakes.Add(-1)
		return false
	}
	return true
}

// err is why the handshake's ctx ended, or nil.
func (h *resumeHandshake) err() error {
	if h.ctx.Err() == nil {
		return nil
	}
	return context.Cause(h.ctx)
}
