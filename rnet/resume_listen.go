package rnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/stream"
)

// The listener's side of resuming a connection: the connection waits in
// its Resume call for its dialer to come back, and the handshake of a
// resume request (handshakeResume, in resume_accept_linux.go) builds the
// new queue pair from what that call gives and hands it over.

// resumedPath is a new queue pair to the peer and its engine, established
// and resuming.
type resumedPath struct {
	qp  stream.QueuePair
	eng *ring.Engine
	// reply is the listener's reply a dialer's path came with, from the
	// address to (nil and zero at the listener).
	reply *resume.Reply
	to    netip.AddrPort
}

// close releases a path no connection took.
func (p resumedPath) close() {
	p.qp.Disconnect()
	p.qp.Shutdown()
	p.qp.Destroy()
}

// resumeWait is a connection's Resume call, waiting at the listener for a
// resume request's handshake to hand it a path.
type resumeWait struct {
	req stream.ResumeRequest
	got chan resumedPath // buffered: the handshake never blocks on it
}

// resumeEntry is one connection in a listener's table (its pointer is the
// table's key) and the connection's stream.Resumer.
type resumeEntry struct {
	r *resumeListener

	mu sync.Mutex
	// Guarded by mu.
	conn *stream.Conn // the connection, once handed out
	peer netip.Addr   // its dialer's address, counted in r.peers until Forget
	path resume.Path  // the path in use, for Table.Suspend
	// wait is the connection's Resume call under way, nil if none; asked
	// is closed, and replaced, whenever wait is set or the connection
	// ends, waking the handshakes that wait for either.
	wait  *resumeWait
	asked chan struct{}
	ended bool
	// handshake is the latest resume request's handshake, nil once it has
	// ended (see resume_handshake.go).
	handshake *resumeHandshake

	// building holds one token, taken by the resume handshake allowed to
	// build a path for the connection.
	building chan struct{}
}

func newResumeEntry(r *resumeListener) *resumeEntry {
	e := &resumeEntry{r: r, asked: make(chan struct{}), building: make(chan struct{}, 1)}
	e.building <- struct{}{}
	return e
}

// handedOut records the connection once it is handed out: a resume
// request may then tell it that its path failed.
func (e *resumeEntry) handedOut(c *stream.Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.conn = c
	if a, ok := c.RemoteAddr().(*Addr); ok && !e.ended {
		e.peer = a.Addr().Unmap()
		e.r.addPeer(e.peer)
	}
}

// signalLocked wakes the handshakes waiting for a Resume call or the end.
func (e *resumeEntry) signalLocked() {
	close(e.asked)
	e.asked = make(chan struct{})
}

// Forget drops the connection's tokens: it has ended for good
// (stream.Resumer). A resume request's handshake waiting for it fails.
func (e *resumeEntry) Forget() {
	e.mu.Lock()
	if !e.ended {
		e.ended = true
		e.signalLocked()
	}
	peer := e.peer
	e.peer = netip.Addr{}
	e.mu.Unlock()
	if peer.IsValid() {
		e.r.dropPeer(peer)
	}
	e.r.table.Forget(e)
}

// errResumeEnded: the connection ended while its dialer was resuming it.
var errResumeEnded = errors.New("rnet: the connection to resume has ended")

// Resume waits for the dialer to come back with the connection's token
// (stream.Resumer): a resume request's handshake builds the new queue pair
// from req and hands it over. Meanwhile the table counts the connection
// as suspended, which bounds the wait by its lifetime too; Forget ends it.
func (e *resumeEntry) Resume(ctx context.Context, req stream.ResumeRequest) (stream.QueuePair, *ring.Engine, error) {
	w := &resumeWait{req: req, got: make(chan resumedPath, 1)}
	e.mu.Lock()
	if e.ended {
		e.mu.Unlock()
		return nil, nil, errResumeEnded
	}
	e.wait = w
	e.signalLocked()
	path, signal, peer := e.path, e.asked, e.peer
	e.mu.Unlock()
	if peer.IsValid() {
		// A dual listener's TCP side waits longer for a resume request
		// from this address meanwhile (resume_tcp_linux.go).
		e.r.waitingFrom(peer, 1)
		defer e.r.waitingFrom(peer, -1)
	}
	e.r.table.Suspend(e, path)
	var err error
	for err == nil {
		select {
		case p := <-w.got:
			return p.qp, p.eng, nil
		case <-signal:
			// Forget, or a signal this call does not wait for.
			e.mu.Lock()
			if e.ended {
				err = errResumeEnded
			}
			signal = e.asked
			e.mu.Unlock()
		case <-ctx.Done():
			err = fmt.Errorf("rnet: the dialer did not resume the connection: %w", context.Cause(ctx))
		}
	}
	e.mu.Lock()
	if e.wait == w {
		e.wait = nil
	}
	e.mu.Unlock()
	select {
	case p := <-w.got:
		// Handed over as the wait ended: the connection fails anyway.
		p.close()
	default:
	}
	return nil, nil, err
}

// await returns the connection's Resume call for a resume request's
// handshake, waiting for it until ctx ends. A connection whose path still
// looks healthy is told that it failed (cause): the dialer's request says
// so.
func (e *resumeEntry) await(ctx context.Context, cause error) (*resumeWait, error) {
	told := false
	for {
		e.mu.Lock()
		conn, w, asked, ended := e.conn, e.wait, e.asked, e.ended
		e.mu.Unlock()
		switch {
		case ended:
			return nil, errResumeEnded
		case w != nil:
			return w, nil
		case conn == nil:
			return nil, errors.New("rnet: resume request for a connection whose own handshake has not completed")
		case !told:
			conn.PathFailed(cause)
			told = true
		}
		select {
		case <-asked:
		case <-ctx.Done():
			return nil, fmt.Errorf("rnet: the connection did not start resuming: %w", context.Cause(ctx))
		}
	}
}

// hand gives w, the Resume call the handshake built p for, its new path,
// numbered path in the table. It reports false if that call is no longer
// waiting (its time ran out, or the connection ended): the caller then
// closes p.
func (e *resumeEntry) hand(w *resumeWait, p resumedPath, path resume.Path) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.wait != w || e.ended {
		return false
	}
	e.wait = nil
	e.path = path
	w.got <- p
	return true
}
