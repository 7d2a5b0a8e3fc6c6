package rnet

import (
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"
	"github.com/rnet-dev/rnet/internal/stream"
)

// Listener is an RDMA stream listener. It implements net.Listener.
//
// Handshakes run in the background: a connection request whose private data
// is malformed, or whose peer vanishes before the connection is established,
// is refused or dropped without disturbing the listener or other connections.
//
// A Listener that is no longer referenced anywhere is closed when the
// garbage collector finds it, as a *net.TCPListener's socket is. Do not rely
// on it: Close the Listener.
type Listener struct {
	_       noCopy
	l       *listener
	cleanup runtime.Cleanup
}

// newListener hands l out. As with Conn, the acceptor references l and
// never the handle, whose cleanup closes l; every method keeps the handle
// alive until it returns.
func newListener(l *listener) *Listener {
	publishExpvar()
	listenerOpened(l)
	h := &Listener{l: l}
	// Close may wait up to Linger for unaccepted connections.
	h.cleanup = runtime.AddCleanup(h, func(l *listener) { go l.Close() }, l)
	return h
}

// Accept waits for and returns the next connection, as a net.Conn.
func (h *Listener) Accept() (net.Conn, error) {
	c, err := h.AcceptRDMA()
	if err != nil {
		return nil, err // never a typed nil inside the interface
	}
	return c, nil
}

// AcceptRDMA waits for and returns the next connection.
func (h *Listener) AcceptRDMA() (*Conn, error) {
	c, err := h.l.accept()
	runtime.KeepAlive(h)
	return c, exportError(err)
}

// Close stops listening. A blocked Accept returns net.ErrClosed; connections
// established but not yet accepted are closed. Accepted ones are not affected.
func (h *Listener) Close() error {
	h.cleanup.Stop()
	err := h.l.Close()
	runtime.KeepAlive(h)
	return err
}

// SetDeadline sets the deadline for Accept, as *net.TCPListener's does: a
// blocked Accept, and any Accept after it, fails with an error matching
// os.ErrDeadlineExceeded once t passes, until a later deadline is set. The
// zero time means none.
func (h *Listener) SetDeadline(t time.Time) error {
	select {
	case <-h.l.done:
		return &net.OpError{Op: "set", Net: "rdma", Addr: h.l.addr, Err: net.ErrClosed}
	default:
	}
	h.l.acceptDL.Set(t)
	runtime.KeepAlive(h)
	return nil
}

// Addr returns the listener's address, an *Addr.
func (h *Listener) Addr() net.Addr { return h.l.addr }

// listener is a Listener's state, which the acceptor goroutine shares.
type listener struct {
	addr      net.Addr
	conns     chan *Conn    // established, waiting for Accept
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	stop      func() // stops the connection manager side; returns when its goroutines have ended

	failOnce sync.Once
	failed   chan struct{} // closed when the listener can accept no more, with failErr
	failErr  error

	acceptDL *stream.Deadline // SetDeadline's: a blocked Accept returns when it passes

	// requests counts the connection requests the acceptor has read and
	// not yet finished with (refused, dropped or queued for Accept), under
	// requestsMu; requestsDone is signalled when it falls to zero.
	requestsMu   lockcount.Mutex
	requests     int
	requestsSeen int // every request ever read, for waitRequests
	requestsDone sync.Cond

	handshakeError func(remote net.Addr, err error) // ListenConfig.HandshakeError, or nil

	counts listenerCounts // Listener.Metrics's
	log    *logger        // ListenConfig.Logger's, or nil
	// resume is the resume extension's state, nil without Config.Resume.
	// Set before the listener is handed out.
	resume *resumeListener
}

// handshakeFailed tells the HandshakeError hook, if any, that the request
// from remote to device was refused (with a reject) or dropped because of
// err, and counts and logs it.
func (l *listener) handshakeFailed(remote net.Addr, device string, err error, refused bool) {
	l.handshakeFailedCounted(remote, device, err, refused)
	if l.handshakeError != nil {
		l.handshakeError(remote, exportError(&net.OpError{Op: "accept", Net: "rdma", Source: l.addr, Addr: remote, Err: err}))
	}
}

// requestBegan counts a connection request the acceptor has just read.
func (l *listener) requestBegan() {
	l.requestsMu.Lock()
	l.requests++
	l.requestsSeen++
	l.requestsDone.Broadcast()
	l.requestsMu.Unlock()
}

// requestEnded counts a request refused, dropped, or queued for Accept.
func (l *listener) requestEnded() {
	l.requestsMu.Lock()
	if l.requests--; l.requests == 0 {
		l.requestsDone.Broadcast()
	}
	l.requestsMu.Unlock()
}

// waitRequests returns once at least seen connection requests have been
// read and every one is finished with, everything made for a refused or
// dropped one released: a settled state for a test to take a resource
// baseline from, after the requests it knows it sent.
func (l *listener) waitRequests(seen int) {
	l.requestsMu.Lock()
	for l.requestsSeen < seen || l.requests > 0 {
		l.requestsDone.Wait()
	}
	l.requestsMu.Unlock()
}

// fail ends accepting for a reason other than Close, such as the removal of
// the device the listener is bound to: Accept returns err from then on,
// after any connection already established.
func (l *listener) fail(err error) {
	l.failOnce.Do(func() {
		l.failErr = err
		close(l.failed)
	})
}

// accept waits for the next connection (see Listener.AcceptRDMA).
func (l *listener) accept() (*Conn, error) {
	select {
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.addr, Err: net.ErrClosed}
	default:
	}
	select {
	case c := <-l.conns:
		l.accepted()
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.addr, Err: net.ErrClosed}
	case <-l.acceptDL.Wait():
		select {
		case c := <-l.conns: // one that came as the deadline passed
			l.accepted()
			return c, nil
		default:
			return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.addr, Err: os.ErrDeadlineExceeded}
		}
	case <-l.failed:
		select {
		case c := <-l.conns:
			l.accepted()
			return c, nil
		default:
			return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.addr, Err: l.failErr}
		}
	}
}

// Close: see Listener.Close.
func (l *listener) Close() error {
	first := false
	l.closeOnce.Do(func() {
		first = true
		listenerClosed(l)
		close(l.done)
		l.acceptDL.Stop()
		l.stop()
		// Side by side: each Close may wait up to Linger for a peer that
		// vanished, and a full backlog of them must not add up.
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			select {
			case c := <-l.conns:
				l.counts.backlogDrops.Add(1)
				wg.Go(func() { c.Close() })
			default:
				return
			}
		}
	})
	if !first {
		return &net.OpError{Op: "close", Net: "rdma", Addr: l.addr, Err: net.ErrClosed}
	}
	return nil
}

// backlogFull says whether the established connections waiting for Accept
// fill the backlog.
func (l *listener) backlogFull() bool { return len(l.conns) == cap(l.conns) }

// offer hands an established connection to Accept, or closes it if the
// listener closes first.
func (l *listener) offer(c *Conn) {
	l.log.established(c, "rnet: connection accepted")
	select {
	case l.conns <- c:
	case <-l.done:
		l.counts.backlogDrops.Add(1)
		c.Close()
	}
}

// eventRetry paces the retries of an event loop whose channel failed with
// something other than being closed (an errno from rdma_get_cm_event, such
// as ENOMEM): such a loop must neither spin on a failure that persists nor
// stop listening for good. The waits double from 5 ms to at most 1 s.
type eventRetry struct{ delay time.Duration }

// wait waits out the next delay, or until done is closed.
func (r *eventRetry) wait(done <-chan struct{}) {
	r.delay = min(max(2*r.delay, 5*time.Millisecond), time.Second)
	t := time.NewTimer(r.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-done:
	}
}

// reset starts over after an event came through.
func (r *eventRetry) reset() { r.delay = 0 }
