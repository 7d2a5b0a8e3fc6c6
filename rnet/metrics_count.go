package rnet

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/rnet-dev/rnet/internal/stream"
)

// The counters behind Metrics live here, each updated with one atomic
// operation where its event happens: connections opening and closing,
// handshakes ending, listeners accepting. None is touched by Read or Write.

// processCounts are the process's Counters but the fallbacks (dialCounts)
// and the SRQ refills (internal/pollgroup's).
var processCounts struct {
	dials, accepts, peersGone atomic.Uint64
	handshakeErrors           failureCounts
}

// pendingSlotsTaken is the pending-handshake slots taken in every
// listener; pendingHandshakes keeps it.
var pendingSlotsTaken atomic.Int64

// openKey names an open-connection gauge.
type openKey struct{ transport, device string }

// openConns are the open-connection gauges. A gauge, once made, stays, so
// a count that falls to zero still shows; there is one per device and
// transport.
var openConns struct {
	mu    sync.Mutex
	byKey map[openKey]*atomic.Int64 // guarded by mu; the counts are not
}

// openGauge returns the gauge of open connections of transport on device.
func openGauge(transport, device string) *atomic.Int64 {
	k := openKey{transport, device}
	openConns.mu.Lock()
	defer openConns.mu.Unlock()
	n := openConns.byKey[k]
	if n == nil {
		if openConns.byKey == nil {
			openConns.byKey = make(map[openKey]*atomic.Int64)
		}
		n = new(atomic.Int64)
		openConns.byKey[k] = n
		publishExpvar()
	}
	return n
}

// deviceNamer is a queue pair on a device.
type deviceNamer interface{ deviceName() string }

// connDevice is the device a connection runs on, as its gauge names it:
// "TCP" once it has resumed over TCP.
func connDevice(c *stream.Conn) string {
	switch q := c.QueuePair().(type) {
	case deviceNamer:
		return q.deviceName()
	case transportNamer:
		return q.Transport() // a path resumed over TCP
	}
	return "simulated"
}

// connObserver counts and logs a connection's opening, its peer vanishing
// and its close (see stream.Observer). The connection's Dialer or
// ListenConfig gives the logger.
type connObserver struct{ log *logger }

func (o connObserver) Opened(c *stream.Conn) { connOpened(c, connDevice(c)) }

func (o connObserver) Closed(c *stream.Conn) { connClosed(c) }

func (o connObserver) PeerGone(c *stream.Conn, err error) {
	processCounts.peersGone.Add(1)
	o.log.peerGone(c, err)
}

// tcpConns are the *TCPConns made and not yet closed, held weakly: one
// dropped without Close stops counting once the collector finds it
// unreachable (its descriptor closes when package net's own finalizer
// finds the embedded *net.TCPConn so), and a cleanup then drops its entry.
var tcpConns struct {
	mu   sync.Mutex
	open map[weak.Pointer[TCPConn]]struct{} // guarded by mu
}

// newTCPConn is a TCPConn counted as open.
func newTCPConn(c *net.TCPConn, reason FallbackReason, cause error) *TCPConn {
	tc := &TCPConn{TCPConn: c, Reason: reason, Cause: cause}
	tcpConns.mu.Lock()
	if tcpConns.open == nil {
		tcpConns.open = make(map[weak.Pointer[TCPConn]]struct{})
	}
	p := weak.Make(tc)
	tcpConns.open[p] = struct{}{}
	tcpConns.mu.Unlock()
	runtime.AddCleanup(tc, forgetTCPConn, p)
	publishExpvar()
	return tc
}

// forgetTCPConn drops p's entry: its TCPConn was closed or collected.
func forgetTCPConn(p weak.Pointer[TCPConn]) {
	tcpConns.mu.Lock()
	delete(tcpConns.open, p)
	tcpConns.mu.Unlock()
}

// Close closes the connection, as *net.TCPConn's Close does.
func (c *TCPConn) Close() error {
	forgetTCPConn(weak.Make(c))
	return c.TCPConn.Close()
}

// openTCPConns counts the TCPConns open now, forgetting those the collector
// found dropped; ok is false if none was ever made.
func openTCPConns() (n int64, ok bool) {
	tcpConns.mu.Lock()
	defer tcpConns.mu.Unlock()
	for p := range tcpConns.open {
		if p.Value() == nil {
			delete(tcpConns.open, p)
		}
	}
	return int64(len(tcpConns.open)), tcpConns.open != nil
}

// openTCPConnList returns the TCPConns open now.
func openTCPConnList() []*TCPConn {
	tcpConns.mu.Lock()
	defer tcpConns.mu.Unlock()
	list := make([]*TCPConn, 0, len(tcpConns.open))
	for p := range tcpConns.open {
		if tc := p.Value(); tc != nil {
			list = append(list, tc)
		}
	}
	return list
}

// handshakeFailure is why a listener refused or dropped a connection
// request, as the metrics name it.
type handshakeFailure int

// The refusals, in rejectCode order, then the failures after the reply.
const (
	failBusy handshakeFailure = iota
	failPendingFull
	failBadRequest
	failLockedMemory
	failResources
	failResumeRefused
	failTimeout
	failEvicted
	failAborted
	numHandshakeFailures

	firstRefusal = failBusy
	lastRefusal  = failResumeRefused
)

var handshakeFailureNames = [numHandshakeFailures]string{
	failBusy:          "busy",
	failPendingFull:   "pending_full",
	failBadRequest:    "bad_request",
	failLockedMemory:  "locked_memory",
	failResources:     "resources",
	failResumeRefused: "resume_refused",
	failTimeout:       "timeout",
	failEvicted:       "evicted",
	failAborted:       "aborted",
}

func (f handshakeFailure) String() string { return handshakeFailureNames[f] }

// handshakeFailureOf classifies err, why a request was refused (with a
// reject) or dropped after the reply.
func handshakeFailureOf(err error, refused bool) handshakeFailure {
	if refused && errors.Is(err, errResumeReplaced) {
		// A resume request whose dialer sent a newer one: not a refusal
		// of the listener's, though the reject says only "resources".
		return failEvicted
	}
	if refused {
		if f, ok := refusalOf(rejectReasonOf(err).code); ok {
			return f
		}
		return failResources
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return failTimeout
	case errors.Is(err, errEvicted), errors.Is(err, errResumeReplaced):
		return failEvicted
	}
	return failAborted
}

// failureCounts count handshake failures by reason.
type failureCounts [numHandshakeFailures]atomic.Uint64

func (fc *failureCounts) read() map[string]uint64 { return fc.readRange(0, numHandshakeFailures-1) }

// readRange returns the counts of the reasons from first to last.
func (fc *failureCounts) readRange(first, last handshakeFailure) map[string]uint64 {
	m := make(map[string]uint64, last-first+1)
	for f := first; f <= last; f++ {
		m[f.String()] = fc[f].Load()
	}
	return m
}

// listenerCounts are a listener's ListenerMetrics.
type listenerCounts struct {
	accepted, backlogDrops atomic.Uint64
	failures               failureCounts
	// pending are the listener's pending-handshake slots; nil on the test
	// fabric. Set before the listener is handed out.
	pending *pendingHandshakes
}

// handshakeFailedCounted counts the request from remote that l refused
// (with a reject) or dropped after its reply because of err, and logs it.
func (l *listener) handshakeFailedCounted(remote net.Addr, device string, err error, refused bool) {
	f := handshakeFailureOf(err, refused)
	l.counts.failures[f].Add(1)
	processCounts.handshakeErrors[f].Add(1)
	l.log.handshakeFailed(l.addr, remote, device, f, err, refused)
}

// accepted counts a connection Accept returns.
func (l *listener) accepted() {
	l.counts.accepted.Add(1)
	processCounts.accepts.Add(1)
}

// dialed counts and logs the end of a Dialer's DialContext.
func (d *Dialer) dialed(c *Conn, address string, err error) {
	if err == nil {
		processCounts.dials.Add(1)
	}
	logFor(d.Logger).dialed(c, address, err)
}
