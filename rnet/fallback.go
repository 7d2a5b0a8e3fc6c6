package rnet

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Falling back to TCP.
//
// A Dialer with TCPFallback, dialling with DialConn, connects over TCP to the
// same host and port when RDMA cannot be used, as Linux's SMC-R does: the
// program runs the same on a laptop without RDMA, a CI runner and an RDMA
// cluster, and learns from the connection which transport it got and why.
// A ListenConfig's ListenDual takes connections of both kinds on one port.

// FallbackReason says why a connection runs over TCP rather than RDMA.
type FallbackReason int

const (
	// FallbackNoDevice: this machine has no RDMA device, or rnet was built
	// without RDMA support for its platform.
	FallbackNoDevice FallbackReason = iota + 1
	// FallbackNoRoute: no RDMA device reaches the address (the address or
	// route resolution of the connection manager failed).
	FallbackNoRoute
	// FallbackRefused: the RDMA connect was refused: nothing listens on
	// that port over RDMA, or the listener refused the connection.
	FallbackRefused
	// FallbackTimeout: the RDMA connect did not complete within the
	// Dialer's RDMAAttemptTimeout.
	FallbackTimeout
	// FallbackRemembered: the address refused RDMA (or timed out) a short
	// while ago (see Dialer.TCPFallbackMemory), so no RDMA attempt was made.
	FallbackRemembered
	// FallbackRDMAError: the RDMA connect failed for another reason (the
	// locked-memory limit, say); Cause says which.
	FallbackRDMAError
	// FallbackPeerTCP: a dual listener accepted the peer over TCP: the
	// peer chose TCP, or could not use RDMA.
	FallbackPeerTCP
)

var fallbackReasons = [...]string{
	FallbackNoDevice:   "no RDMA device",
	FallbackNoRoute:    "no RDMA route",
	FallbackRefused:    "RDMA refused",
	FallbackTimeout:    "RDMA timed out",
	FallbackRemembered: "RDMA refused recently",
	FallbackRDMAError:  "RDMA failed",
	FallbackPeerTCP:    "peer connected over TCP",
}

func (r FallbackReason) String() string {
	if r > 0 && int(r) < len(fallbackReasons) {
		return fallbackReasons[r]
	}
	return "FallbackReason(" + strconv.Itoa(int(r)) + ")"
}

// TCPConn is a connection made over TCP where RDMA could not be used: by a
// Dialer's DialConn with TCPFallback, or accepted by a dual listener. Its
// methods are the *net.TCPConn's.
type TCPConn struct {
	*net.TCPConn
	// Reason says why the connection is not over RDMA.
	Reason FallbackReason
	// Cause is the RDMA attempt's error, when one was made and failed.
	Cause error
}

// Transport returns the transport a connection from this package runs
// on: "rdma" for a *Conn, "tcp" for a *TCPConn, "" for anything else.
func Transport(c net.Conn) string {
	switch c.(type) {
	case *Conn:
		return "rdma"
	case *TCPConn:
		return "tcp"
	}
	return ""
}

// FallbackStats counts the connections DialConn with TCPFallback made,
// process-wide: over RDMA, and over TCP by the reason for falling back.
type FallbackStats struct {
	RDMA uint64
	TCP  [FallbackPeerTCP + 1]uint64 // indexed by FallbackReason; [0] unused
}

// DialFallbackStats returns the process's FallbackStats so far.
func DialFallbackStats() FallbackStats {
	var s FallbackStats
	s.RDMA = dialCounts[0].Load()
	for i := 1; i < len(s.TCP); i++ {
		s.TCP[i] = dialCounts[i].Load()
	}
	return s
}

// dialCounts are FallbackStats' counters: [0] RDMA, [r] TCP for reason r.
var dialCounts [FallbackPeerTCP + 1]atomic.Uint64

// defaultRDMAAttemptTimeout bounds a falling-back dial's RDMA attempt:
// long enough for a connect on an emulated device, short enough that a
// path that drops RDMA connect requests costs a program little.
const defaultRDMAAttemptTimeout = 3 * time.Second

// defaultTCPFallbackMemory is how long an address that refused RDMA is
// dialled over TCP straight away.
const defaultTCPFallbackMemory = 30 * time.Second

// DialConn connects to address as DialContext does and returns the
// connection as a net.Conn: a *Conn. With TCPFallback, when RDMA cannot be
// used it connects over TCP to the same host and port instead ("tcp",
// "tcp4" or "tcp6" for "rdma", "rdma4" or "rdma6") and returns a *TCPConn
// that says why. A dial that the context ends, an invalid Config or an
// address that does not resolve fails without falling back.
func (d *Dialer) DialConn(ctx context.Context, network, address string) (net.Conn, error) {
	if !d.TCPFallback {
		c, err := d.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	tcpNet, ok := tcpNetworks[network]
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError(network)}
	}
	// Timeout and Deadline bound both attempts together.
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if d.TCPFallbackMemory >= 0 {
		if refusedRecently.has(network, address, time.Now()) {
			return d.dialTCP(ctx, tcpNet, address, FallbackRemembered, nil)
		}
	}
	attempt := ctx
	timeout := d.RDMAAttemptTimeout
	if timeout == 0 {
		timeout = defaultRDMAAttemptTimeout
	}
	var cancelAttempt context.CancelFunc
	if timeout > 0 {
		attempt, cancelAttempt = context.WithTimeout(ctx, timeout)
	} else {
		attempt, cancelAttempt = context.WithCancel(ctx)
	}
	c, err := d.DialContext(attempt, network, address)
	cancelAttempt()
	if err == nil {
		refusedRecently.forget(network, address)
		dialCounts[0].Add(1)
		return c, nil
	}
	reason, ok := fallbackReasonOf(ctx, err)
	if !ok {
		return nil, err
	}
	if memory := d.TCPFallbackMemory; memory >= 0 && (reason == FallbackRefused || reason == FallbackTimeout) {
		if memory == 0 {
			memory = defaultTCPFallbackMemory
		}
		refusedRecently.remember(network, address, time.Now().Add(memory))
	}
	return d.dialTCP(ctx, tcpNet, address, reason, err)
}

var tcpNetworks = map[string]string{"rdma": "tcp", "rdma4": "tcp4", "rdma6": "tcp6"}

// dialTCP is the fallback's TCP connect, from the Dialer's local address;
// ctx carries its Timeout.
func (d *Dialer) dialTCP(ctx context.Context, network, address string, reason FallbackReason, cause error) (net.Conn, error) {
	nd := net.Dialer{FallbackDelay: d.FallbackDelay}
	if d.LocalAddr != nil {
		ip, err := localIP(d.LocalAddr)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		nd.LocalAddr = &net.TCPAddr{IP: ip.AsSlice(), Zone: ip.Zone()}
	}
	c, err := nd.DialContext(ctx, network, address)
	if err != nil {
		if cause != nil {
			// Both failed: say so, keeping the TCP error first for errors.Is.
			err = &net.OpError{Op: "dial", Net: network, Err: fallbackError{tcp: err, rdma: cause}}
		}
		return nil, err
	}
	dialCounts[reason].Add(1)
	return &TCPConn{TCPConn: c.(*net.TCPConn), Reason: reason, Cause: cause}, nil
}

// fallbackError is a fallback dial's failure: the TCP dial failed after
// the RDMA one had.
type fallbackError struct{ tcp, rdma error }

func (e fallbackError) Error() string {
	return e.tcp.Error() + " (after falling back from RDMA: " + e.rdma.Error() + ")"
}

func (e fallbackError) Unwrap() []error { return []error{e.tcp, e.rdma} }

// fallbackReasonOf says why err, a failed RDMA dial, may fall back to TCP,
// or reports false when it must not: the caller's context ended, or the
// Dialer's Config or the address is wrong whatever the transport.
func fallbackReasonOf(ctx context.Context, err error) (FallbackReason, bool) {
	var cfgErr *ConfigError
	var dnsErr *net.DNSError
	var addrErr *net.AddrError
	var unknown net.UnknownNetworkError
	switch {
	case ctx.Err() != nil, errors.As(err, &cfgErr), errors.As(err, &dnsErr), errors.As(err, &addrErr), errors.As(err, &unknown):
		return 0, false
	case errors.Is(err, ErrNoDevice), errors.Is(err, ErrNotSupported):
		return FallbackNoDevice, true
	case errors.Is(err, syscall.ECONNREFUSED):
		return FallbackRefused, true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return FallbackTimeout, true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.ENODEV):
		return FallbackNoRoute, true
	}
	return FallbackRDMAError, true
}

// refusedRecently holds the addresses whose RDMA connect was refused or
// timed out lately, process-wide: every Dialer of the process learns from
// each.
var refusedRecently = refusalMemory{until: make(map[string]time.Time)}

// refusalMemory maps network and address to when the memory of a refusal
// ends. It forgets expired entries as it meets them, and drops all once it
// holds maxRefusals, so that it stays small whatever is dialled.
type refusalMemory struct {
	mu    sync.Mutex
	until map[string]time.Time
}

const maxRefusals = 4096

func refusalKey(network, address string) string { return network + " " + address }

func (m *refusalMemory) has(network, address string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := refusalKey(network, address)
	until, ok := m.until[k]
	if ok && !now.Before(until) {
		delete(m.until, k)
		return false
	}
	return ok
}

func (m *refusalMemory) remember(network, address string, until time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.until) >= maxRefusals {
		clear(m.until)
	}
	m.until[refusalKey(network, address)] = until
}

func (m *refusalMemory) forget(network, address string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.until, refusalKey(network, address))
}
