package rnet

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/lockcount"
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
	// that port over RDMA, or the listener refused the connection (busy,
	// and still busy when the dial had tried again for as long as
	// RDMAAttemptTimeout allowed, say); Cause says which.
	FallbackRefused
	// FallbackTimeout: the RDMA connect did not complete within the
	// Dialer's RDMAAttemptTimeout.
	FallbackTimeout
	// FallbackRemembered: an RDMA attempt to the address found no RDMA
	// there a short while ago (no route, or nothing listening;
	// see Dialer.TCPFallbackMemory), so no RDMA attempt was made. Cause
	// says when, and holds that attempt's error.
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

// fallbackReasonNames are the reasons as MarshalText writes them: short,
// stable, snake_case, for metric labels and JSON.
var fallbackReasonNames = [...]string{
	0:                  "none",
	FallbackNoDevice:   "no_device",
	FallbackNoRoute:    "no_route",
	FallbackRefused:    "refused",
	FallbackTimeout:    "timeout",
	FallbackRemembered: "remembered",
	FallbackRDMAError:  "rdma_error",
	FallbackPeerTCP:    "peer_tcp",
}

func (r FallbackReason) String() string {
	if r > 0 && int(r) < len(fallbackReasons) {
		return fallbackReasons[r]
	}
	return "FallbackReason(" + strconv.Itoa(int(r)) + ")"
}

// MarshalText names the reason for a metric label or a JSON key:
// "no_device", "no_route", "refused", "timeout", "remembered",
// "rdma_error" or "peer_tcp"; the zero FallbackReason, no fallback, is
// "none".
func (r FallbackReason) MarshalText() ([]byte, error) {
	if r >= 0 && int(r) < len(fallbackReasonNames) {
		return []byte(fallbackReasonNames[r]), nil
	}
	return nil, errors.New("rnet: no FallbackReason " + strconv.Itoa(int(r)))
}

// UnmarshalText takes a name MarshalText writes.
func (r *FallbackReason) UnmarshalText(text []byte) error {
	for i, name := range fallbackReasonNames {
		if name == string(text) {
			*r = FallbackReason(i)
			return nil
		}
	}
	return errors.New("rnet: no FallbackReason named " + strconv.Quote(string(text)))
}

// TCPConn is a connection made over TCP where RDMA could not be used: by a
// Dialer's DialConn with TCPFallback, or accepted by a dual listener. Its
// methods are the *net.TCPConn's.
type TCPConn struct {
	*net.TCPConn
	// Reason says why the connection is not over RDMA.
	Reason FallbackReason
	// Cause is why RDMA was not used: the RDMA attempt's error, or, for
	// FallbackRemembered, an error that says how long ago the remembered
	// attempt failed and unwraps to that attempt's error. It is nil only
	// for a TCPConn a dual listener accepted.
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
	RDMA uint64                    `json:"rdma"`
	TCP  map[FallbackReason]uint64 `json:"tcp"` // every reason a dial can have, zero or not
}

// DialFallbackStats returns the process's FallbackStats so far.
func DialFallbackStats() FallbackStats {
	s := FallbackStats{RDMA: dialCounts[0].Load(), TCP: make(map[FallbackReason]uint64, FallbackRDMAError)}
	for r := FallbackNoDevice; r <= FallbackRDMAError; r++ {
		s.TCP[r] = dialCounts[r].Load()
	}
	return s
}

// dialCounts are FallbackStats' counters: [0] RDMA, [r] TCP for reason r.
var dialCounts [FallbackPeerTCP + 1]atomic.Uint64

// defaultRDMAAttemptTimeout bounds a falling-back dial's RDMA attempt:
// long enough for a connect on an emulated device, short enough that a
// path that drops RDMA connect requests costs a program little.
const defaultRDMAAttemptTimeout = 3 * time.Second

// defaultTCPFallbackMemory is how long an address where RDMA was not to be
// had is dialled over TCP straight away.
const defaultTCPFallbackMemory = 30 * time.Second

// DialConn connects to address as DialContext does and returns the
// connection as a net.Conn: a *Conn. With TCPFallback, when RDMA cannot be
// used it connects over TCP to the same host and port instead ("tcp",
// "tcp4" or "tcp6" for "rdma", "rdma4" or "rdma6") and returns a *TCPConn
// that says why. A dial that the context ends, an invalid Config or an
// address that does not resolve fails without falling back.
//
// It has net.Dialer.DialContext's signature and takes its networks too:
// "tcp", "tcp4" and "tcp6" mean "rdma", "rdma4" and "rdma6", so that it
// drops in where code dials TCP, as http.Transport's DialContext does.
func (d *Dialer) DialConn(ctx context.Context, network, address string) (net.Conn, error) {
	if rdmaNet, ok := RDMANetwork(network); ok {
		network = rdmaNet
	}
	if !d.TCPFallback {
		c, err := d.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	c, err := d.dialFallback(ctx, network, address)
	return c, exportError(err)
}

// dialFallback is DialConn with TCPFallback, with the internal packages'
// errors.
func (d *Dialer) dialFallback(ctx context.Context, network, address string) (net.Conn, error) {
	tcpNet, ok := tcpNetworks[network]
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError(network)}
	}
	// Timeout and Deadline bound both attempts together.
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if d.TCPFallbackMemory >= 0 {
		if why := refusedRecently.lookup(network, address, time.Now()); why != nil {
			return d.dialTCP(ctx, tcpNet, address, FallbackRemembered, why)
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
	c, err := d.dialRDMA(attempt, network, address)
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
	if memory := d.TCPFallbackMemory; memory >= 0 && lastingRefusal(reason, err) {
		if memory == 0 {
			memory = defaultTCPFallbackMemory
		}
		now := time.Now()
		refusedRecently.remember(network, address, refusal{at: now, until: now.Add(memory), reason: reason, err: err})
	}
	return d.dialTCP(ctx, tcpNet, address, reason, err)
}

var tcpNetworks = map[string]string{"rdma": "tcp", "rdma4": "tcp4", "rdma6": "tcp6"}

// RDMANetwork returns the RDMA network that stands for network where a
// dial of TCP is asked for: "rdma" for "tcp" or "rdma", "rdma4" for "tcp4"
// or "rdma4", "rdma6" for "tcp6" or "rdma6"; false for any other.
func RDMANetwork(network string) (string, bool) {
	switch network {
	case "tcp", "rdma":
		return "rdma", true
	case "tcp4", "rdma4":
		return "rdma4", true
	case "tcp6", "rdma6":
		return "rdma6", true
	}
	return "", false
}

// dialRDMA is DialConn's RDMA attempt.
func (d *Dialer) dialRDMA(ctx context.Context, network, address string) (*Conn, error) {
	if hook := testHookDialRDMA.Load(); hook != nil {
		return (*hook)(ctx, network, address)
	}
	c, err := d.dialContext(ctx, network, address)
	// Counted and logged as DialContext's are; the fallback classifies
	// the internal error.
	d.dialed(c, address, exportError(err))
	return c, err
}

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
		if cause == nil {
			return nil, err
		}
		// Both failed, or TCP did where RDMA was not tried: say why, in
		// the TCP dial's own *net.OpError.
		if oe, ok := err.(*net.OpError); ok {
			withCause := *oe
			withCause.Err = fallbackError{tcp: oe.Err, rdma: cause}
			return nil, &withCause
		}
		return nil, &net.OpError{Op: "dial", Net: network, Err: fallbackError{tcp: err, rdma: cause}}
	}
	dialCounts[reason].Add(1)
	tc := newTCPConn(c.(*net.TCPConn), reason, exportError(cause))
	logFor(d.Logger).fellBack(tc, address)
	return tc, nil
}

// fallbackError is a fallback dial's failure: the TCP dial failed after
// the RDMA one had, or where RDMA was not tried. The TCP error comes first,
// for errors.Is and for Timeout.
type fallbackError struct{ tcp, rdma error }

func (e fallbackError) Error() string {
	if _, remembered := e.rdma.(*rememberedRefusal); remembered {
		return e.tcp.Error() + " (" + e.rdma.Error() + ")"
	}
	return e.tcp.Error() + " (after falling back from RDMA: " + e.rdma.Error() + ")"
}

func (e fallbackError) Unwrap() []error { return []error{e.tcp, e.rdma} }

// Timeout is the TCP dial's, so that a fallback dial that ran out of time
// says so as net's errors do.
func (e fallbackError) Timeout() bool {
	var ne net.Error
	return errors.As(e.tcp, &ne) && ne.Timeout()
}

// lastingRefusal reports whether the failed RDMA attempt err, which falls
// back for reason, says that RDMA is not to be had at that address for a
// while: no route there, or nothing listening there over RDMA (the
// connection manager's reject when nothing listens, or iWARP's refused TCP
// connect). A reject from a listener that is there says the opposite, with
// an rnet reason (busy, short of memory) or without one (a C rsocket
// listener out of memory, or a listener closing with requests unread): the
// next dial may get in. No device here is checked again at no cost, and
// stays exact. A timeout says only that no answer came in time, which a
// listener under a flood of requests gives too. Anyone on the path can
// forge a reject, so a remembered refusal can force TCP for a while on
// dials that allow it, and no more.
func lastingRefusal(reason FallbackReason, err error) bool {
	switch reason {
	case FallbackNoRoute:
		return true
	case FallbackRefused:
		var re *cm.RejectError
		if !errors.As(err, &re) || !re.NoListener() {
			return false
		}
		_, fromRnet := decodeRejectReason(re.PrivateData)
		return !fromRnet
	}
	return false
}

// rememberedRefusal is the Cause of a dial that went to TCP without trying
// RDMA, because an attempt a short while ago found no RDMA there.
type rememberedRefusal struct {
	reason FallbackReason // the earlier attempt's
	age    time.Duration  // how long before this dial it failed
	err    error          // the earlier attempt's error
}

func (e *rememberedRefusal) Error() string {
	what := "failed"
	switch e.reason {
	case FallbackRefused:
		what = "refused"
	case FallbackNoRoute:
		what = "no route"
	case FallbackNoDevice:
		what = "no device"
	}
	age := strconv.FormatInt(int64(e.age/time.Second), 10) + " s"
	if e.age < time.Second {
		age = strconv.FormatInt(e.age.Milliseconds(), 10) + " ms"
	}
	return "RDMA not tried: " + what + " " + age + " ago: " + e.err.Error()
}

func (e *rememberedRefusal) Unwrap() error { return e.err }

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

// refusedRecently holds the addresses where an RDMA attempt lately found
// no RDMA (see lastingRefusal), process-wide: every Dialer of the process
// learns from each.
var refusedRecently = refusalMemory{refusals: make(map[string]refusal)}

// refusalMemory maps network and address to the refusal remembered there.
// It forgets expired entries as it meets them, and drops all once it holds
// maxRefusals, so that it stays small whatever is dialled.
type refusalMemory struct {
	mu       lockcount.Mutex
	refusals map[string]refusal // under mu
}

// refusal is a remembered failure of an RDMA attempt.
type refusal struct {
	at, until time.Time // when it failed; when the memory of it ends
	reason    FallbackReason
	err       error
}

const maxRefusals = 4096

func refusalKey(network, address string) string { return network + " " + address }

// lookup returns, for a dial at now, why RDMA is not to be tried, or nil
// if no refusal is remembered for the address.
func (m *refusalMemory) lookup(network, address string, now time.Time) *rememberedRefusal {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := refusalKey(network, address)
	r, ok := m.refusals[k]
	if !ok {
		return nil
	}
	if !now.Before(r.until) {
		delete(m.refusals, k)
		return nil
	}
	return &rememberedRefusal{reason: r.reason, age: now.Sub(r.at), err: r.err}
}

func (m *refusalMemory) remember(network, address string, r refusal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.refusals) >= maxRefusals {
		clear(m.refusals)
	}
	m.refusals[refusalKey(network, address)] = r
}

func (m *refusalMemory) forget(network, address string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.refusals, refusalKey(network, address))
}
