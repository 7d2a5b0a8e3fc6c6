package rnet

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"time"
)

// Listen announces on the local RDMA address, as net.Listen does for TCP.
// network is "rdma", "rdma4" or "rdma6"; address is "host:port" where host is
// the IP address of an RDMA-capable interface, or empty (or a wildcard
// address) for every device. As with "tcp", a wildcard on "rdma" takes IPv4
// and IPv6 connections and its Addr is "[::]:port"; "rdma4" and "rdma6" keep
// to one family.
func Listen(network, address string) (*Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), network, address)
}

// Dial connects to address on the named network ("rdma", "rdma4", "rdma6").
func Dial(network, address string) (*Conn, error) {
	var d Dialer
	return d.DialContext(context.Background(), network, address)
}

// DialContext is Dial with a context: cancelling it, or its deadline passing,
// abandons the connect with an error that matches the context's.
func DialContext(ctx context.Context, network, address string) (*Conn, error) {
	var d Dialer
	return d.DialContext(ctx, network, address)
}

// DialConn is the easy form of DialContext for code that wants a net.Conn:
// it has net.Dialer.DialContext's signature and networks ("tcp", "tcp4"
// and "tcp6" dial over RDMA), so it is the whole of http.Transport's
// DialContext, and a failed dial returns a nil net.Conn, never a nil *Conn
// inside one. It is (&Dialer{}).DialConn.
func DialConn(ctx context.Context, network, address string) (net.Conn, error) {
	var d Dialer
	return d.DialConn(ctx, network, address)
}

// Dialer holds options for connecting. The zero value is ready to use.
type Dialer struct {
	// Config sizes the connection; nil means the defaults.
	Config *Config
	// Timeout bounds the whole connect (address and route resolution, the
	// connection handshake). 0 means no limit beyond the context's and
	// Config.HandshakeTimeout, which bounds the waits on the peer (10 s by
	// default; negative leaves them to the connection manager's retries,
	// about a minute).
	Timeout time.Duration
	// Deadline is the absolute time after which a dial fails, as
	// net.Dialer's; with Timeout too, the earlier of the two counts. The
	// zero time means none.
	Deadline time.Time
	// LocalAddr is the local address to connect from: it picks the RDMA
	// device. An *Addr, a *net.TCPAddr, a *net.IPAddr, or anything whose
	// String() is "host:port" or an IP address. nil lets the routing table
	// choose.
	LocalAddr net.Addr
	// Device is the RDMA device to dial from, by name (such as "mlx5_0" or
	// "rxe0", as `rnet devices` and `rdma link` list them): the dial goes
	// from the device's address of the remote address's family. With
	// LocalAddr too, LocalAddr must be one of the device's. "" lets
	// LocalAddr or the routing table choose. A device this machine lacks
	// fails the dial with an error naming the devices it has (on a machine
	// without any, the error matches ErrNoDevice).
	Device string
	// FallbackDelay is how long a dial on "rdma" to a host name with both
	// IPv4 and IPv6 addresses gives the resolver's first family before it
	// also tries the other family (RFC 6555 Fast Fallback, as net.Dialer
	// does): the first to connect wins, and the other attempt is abandoned
	// and released. 0 means 300 ms; a negative value tries the addresses one
	// after another.
	FallbackDelay time.Duration
	// TCPFallback makes DialConn connect over TCP, to the same host and
	// port, when it cannot connect over RDMA: no RDMA device, no RDMA route,
	// the RDMA connect refused or not done within RDMAAttemptTimeout. The
	// connection it returns is then a *TCPConn that says why. Dial and
	// DialContext never fall back. Rejects are not authenticated: whoever
	// can forge one for the dial's request can make it fall back. With
	// Config.Resume, it also lets a connection this Dialer made (by any
	// of its methods) resume over TCP, to the port dialled, when its path
	// fails and no RDMA path is left, if the listener is a DualListener
	// (see docs/design.md, "Resuming over TCP"). Default false.
	TCPFallback bool
	// RDMAAttemptTimeout bounds the RDMA attempt of a DialConn with
	// TCPFallback, within Timeout and the context. 0 means 3 s; negative
	// means no bound of its own.
	RDMAAttemptTimeout time.Duration
	// TCPFallbackMemory is how long an address where an RDMA attempt found
	// no RDMA (no route, or nothing listening over RDMA) is
	// dialled over TCP straight away by DialConn with TCPFallback (the
	// memory is the process's, shared by its Dialers), so that a fleet
	// where some servers lack RDMA does not pay a failed attempt per dial.
	// A busy listener, a listener's other refusals and a timeout fall back
	// for their own dial only. 0 means 30 s; negative means no memory.
	TCPFallbackMemory time.Duration
	// Logger, if not nil, is told of handshakes (at debug level), of
	// dials that fail or are refused (warn, with the reason), of peers
	// that vanish (warn), of rings that grow or shrink (debug; warn when
	// the new region could not be registered), of falling back to TCP
	// (warn) and of resumes (Config.Resume: info when one completes, warn
	// when one gives up). Its records' attribute keys are stable: local,
	// remote, device, qp, remote_qp, reason, error, transport, ring, size,
	// took, resent. nil logs nothing.
	Logger *slog.Logger
}

// Dial connects to address.
func (d *Dialer) Dial(network, address string) (*Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address, honouring ctx as net.Dialer does. A host
// name with several addresses of one family is dialled one address after
// another, in the resolver's order, until one connects; with a deadline each
// attempt gets a share of the time left (at least 2 s, as net.Dialer gives),
// and the error is the first attempt's. A name with both families is dialled
// family by family side by side, the second starting FallbackDelay after the
// first or as soon as the first fails. A LocalAddr limits the addresses to
// its family.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (*Conn, error) {
	c, err := d.dialContext(ctx, network, address)
	err = exportError(err)
	d.dialed(c, address, err)
	return c, err
}

// dialContext is DialContext with the internal packages' errors; after a
// failure (and DialConn's RDMA attempts go through here too) the next dial
// looks the Device's addresses up again, as they may have changed.
func (d *Dialer) dialContext(ctx context.Context, network, address string) (c *Conn, err error) {
	if d.Device != "" {
		defer func() {
			if err != nil {
				forgetDeviceAddrs(d.Device)
			}
		}()
	}
	if err := d.Config.validate(); err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	raddrs, err := resolveAddrs(ctx, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	var laddr netip.Addr
	if d.LocalAddr != nil {
		if laddr, err = localIP(d.LocalAddr); err != nil {
			return nil, &net.OpError{Op: "dial", Net: "rdma", Addr: netAddr(raddrs[0]), Err: err}
		}
	}
	if laddr.IsValid() {
		raddrs = sameFamily(raddrs, laddr)
		if len(raddrs) == 0 {
			return nil, &net.OpError{Op: "dial", Net: "rdma", Source: netAddr(netip.AddrPortFrom(laddr, 0)),
				Err: &net.AddrError{Err: "no suitable address found", Addr: address}}
		}
	}
	from := func(netip.Addr) netip.Addr { return laddr }
	if d.Device != "" {
		if raddrs, from, err = deviceLocal(d.Device, laddr, raddrs); err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
	}
	set := d.Config.settings()
	set.logger = d.Logger
	set.tcpResume = d.TCPFallback
	dialOne := func(ctx context.Context, raddr netip.AddrPort) (*Conn, error) {
		if !raddr.Addr().IsValid() || raddr.Addr().IsUnspecified() {
			return nil, &net.OpError{Op: "dial", Net: "rdma", Addr: netAddr(raddr), Err: errors.New("missing address to dial")}
		}
		return dial(ctx, set, from(raddr.Addr()), raddr)
	}
	if network != "rdma" || d.FallbackDelay < 0 {
		return dialSerial(ctx, raddrs, dialOne)
	}
	primaries, fallbacks := splitFamilies(raddrs)
	delay := d.FallbackDelay
	if delay == 0 {
		delay = defaultFallbackDelay
	}
	return dialParallel(ctx, primaries, fallbacks, delay, dialOne, func(c *Conn) { c.Close() })
}

// bound applies Timeout and Deadline to ctx.
func (d *Dialer) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	cancels := []context.CancelFunc{}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		cancels = append(cancels, cancel)
	}
	if !d.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Deadline)
		cancels = append(cancels, cancel)
	}
	return ctx, func() {
		for _, c := range cancels {
			c()
		}
	}
}

// defaultFallbackDelay is net.Dialer's, which RFC 6555 suggests.
const defaultFallbackDelay = 300 * time.Millisecond

// splitFamilies splits addrs into those of the first address's family, in
// order, and the rest.
func splitFamilies(addrs []netip.AddrPort) (primaries, fallbacks []netip.AddrPort) {
	for _, a := range addrs {
		if a.Addr().Is4() == addrs[0].Addr().Is4() {
			primaries = append(primaries, a)
		} else {
			fallbacks = append(fallbacks, a)
		}
	}
	return primaries, fallbacks
}

// dialParallel races the primaries, dialled in turn, against the fallbacks,
// dialled in turn from delay later or from the primaries' failure if that
// comes first. The first connection wins; the other race is cancelled, and a
// connection it still made is passed to discard on a goroutine of its own
// (closing may take up to Linger, as net closes a late winner in its racer).
// Both dials have ended when it returns: a cancelled dial ends at once, and
// none is left holding resources unaccounted for. If both fail, the error
// is the primaries'.
func dialParallel(ctx context.Context, primaries, fallbacks []netip.AddrPort, delay time.Duration,
	dialOne func(context.Context, netip.AddrPort) (*Conn, error), discard func(*Conn)) (*Conn, error) {
	if len(fallbacks) == 0 {
		return dialSerial(ctx, primaries, dialOne)
	}
	type outcome struct {
		c       *Conn
		err     error
		primary bool
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	outcomes := make(chan outcome, 2)
	race := func(addrs []netip.AddrPort, primary bool) {
		go func() {
			c, err := dialSerial(ctx, addrs, dialOne)
			outcomes <- outcome{c, err, primary}
		}()
	}
	race(primaries, true)
	running, fallbackStarted := 1, false
	startFallback := func() {
		if !fallbackStarted {
			fallbackStarted = true
			running++
			race(fallbacks, false)
		}
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	var primaryErr, fallbackErr error
	for running > 0 {
		select {
		case <-timer.C:
			startFallback()
		case o := <-outcomes:
			running--
			if o.err == nil {
				cancel()
				for ; running > 0; running-- {
					if late := <-outcomes; late.err == nil {
						go discard(late.c)
					}
				}
				return o.c, nil
			}
			if o.primary {
				primaryErr = o.err
				startFallback()
			} else {
				fallbackErr = o.err
			}
		}
	}
	if primaryErr != nil {
		return nil, primaryErr
	}
	return nil, fallbackErr
}

// sameFamily keeps the addresses of local's family: a connection cannot run
// from an IPv4 address to an IPv6 one.
func sameFamily(addrs []netip.AddrPort, local netip.Addr) []netip.AddrPort {
	var kept []netip.AddrPort
	for _, a := range addrs {
		if a.Addr().Is4() == local.Is4() {
			kept = append(kept, a)
		}
	}
	return kept
}

// dialSerial tries each address in turn until one connects, as net.Dialer
// does without Happy Eyeballs, and returns the first error if none does.
func dialSerial(ctx context.Context, raddrs []netip.AddrPort, dialOne func(context.Context, netip.AddrPort) (*Conn, error)) (*Conn, error) {
	var first error
	for i, raddr := range raddrs {
		if err := ctx.Err(); err != nil {
			if first == nil {
				first = dialError(ctx, nil, netAddr(raddr), err)
			}
			break
		}
		attempt := ctx
		cancel := func() {}
		if deadline, ok := ctx.Deadline(); ok && len(raddrs)-i > 1 {
			attempt, cancel = context.WithDeadline(ctx, partialDeadline(time.Now(), deadline, len(raddrs)-i))
		}
		c, err := dialOne(attempt, raddr)
		cancel()
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// partialDeadline is the deadline of one attempt among addrsLeft when the
// whole dial must end by deadline: an equal share of the time left, but at
// least 2 s (or all of it, if less is left), as net.Dialer gives.
func partialDeadline(now, deadline time.Time, addrsLeft int) time.Time {
	const saneMinimum = 2 * time.Second
	left := deadline.Sub(now)
	share := left / time.Duration(addrsLeft)
	if share < saneMinimum {
		share = min(saneMinimum, left)
	}
	return now.Add(share)
}

// localIP is the IP of a Dialer's LocalAddr. Like net.Dialer it keeps an
// IPv6 zone (a link-local source needs it) and takes a typed nil for none.
func localIP(a net.Addr) (netip.Addr, error) {
	switch a := a.(type) {
	case *Addr:
		if a == nil {
			return netip.Addr{}, nil
		}
		return a.Addr(), nil
	case *net.TCPAddr:
		if a == nil {
			return netip.Addr{}, nil
		}
		return ipWithZone(a.IP, a.Zone), nil
	case *net.IPAddr:
		if a == nil {
			return netip.Addr{}, nil
		}
		return ipWithZone(a.IP, a.Zone), nil
	}
	s := a.String()
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, &net.AddrError{Err: "local address is not an IP address", Addr: s}
	}
	return ip.Unmap(), nil
}

// ListenConfig holds options for listening. The zero value is ready to use.
type ListenConfig struct {
	// Config sizes every accepted connection; nil means the defaults.
	Config *Config
	// Backlog is how many connection requests may wait in line for a
	// pending-handshake slot (and at most four per slot, since each holds
	// an fd), and how many established connections may wait for Accept;
	// past either a new request is refused as busy, as a
	// full TCP accept queue refuses it, and an rnet dialer tries again
	// shortly. 0 means 128; more than 65535 means 65535.
	Backlog int
	// MaxPendingHandshakes bounds the connection requests the Listener is
	// setting up or whose dialer has yet to confirm our reply with its
	// RTU. Each pins a connection's idle rings (40 KiB with the default
	// Config; 156 KiB on iWARP) before the dialer has shown it is real, so this bound times
	// that is the most that requests which never complete can pin. Past
	// the bound a new request takes the slot of the handshake that has
	// waited longest for its RTU, once that wait passes 1 s, or four times
	// the slowest recent RTU if that is longer, up to 10 s (a live dialer
	// answers within a round trip, later when its own process is busy; a
	// stalled one never does). Until then it waits in line (see Backlog),
	// first come first served; so under a flood of such requests the
	// Listener still takes at least a tenth of this many new ones a
	// second, in the order they came, real dialers among them. 0
	// means as many as pin 4 MiB, half of a common 8 MiB RLIMIT_MEMLOCK,
	// and at least 16: with the default Config, 102 for a listener on a
	// RoCE or InfiniBand address, 26 on an iWARP one or on every device
	// (an iWARP connection starts with its whole receive ring); a negative
	// value means the default too, and one above 65535 means 65535. A resume's handshake (Config.Resume) takes no slot: it is
	// bounded per connection, one at a time, a newer request ending it.
	MaxPendingHandshakes int
	// HandshakeError, if set, is told of every connection request the
	// Listener refused or dropped before Accept could return it: remote is
	// the dialer's address, err a *net.OpError saying why. Its cause
	// matches ErrLockedMemory when the locked-memory limit kept this
	// process from registering the connection's rings, ErrProtocol when
	// the request's private data was unusable, context.DeadlineExceeded
	// when the dialer did not complete the handshake within
	// Config.HandshakeTimeout; when it was refused as busy, the text says
	// which limit. A dialer that is rnet is told the reason for a refusal
	// in the reject, and its error names it; the numbers behind it (this
	// process's locked-memory limit, an errno) go only to HandshakeError.
	// HandshakeError is called from the Listener's own goroutines, several
	// at once when handshakes run side by side, so it must be safe for
	// concurrent use;
	// it must return promptly and not call the Listener's Close, since a
	// refusal made while reading requests holds up every later request
	// until it returns. Log it, or count it.
	HandshakeError func(remote net.Addr, err error)
	// Logger, if not nil, is told of handshakes (at debug level), of
	// requests refused and handshakes that failed (warn, with the
	// reason, the dialer's address and the device), of peers that vanish
	// (warn), of rings that grow or shrink (debug) and of resumes
	// (Config.Resume: info when one completes, warn when one gives up).
	// Its records' attribute keys are stable: listener, local, remote,
	// device, qp, remote_qp, reason, error, ring, size, took, resent. nil
	// logs nothing.
	Logger *slog.Logger
	// Device is the RDMA device to listen on, by name (such as "mlx5_0"
	// or "rxe0"): an address without a host (":7471") listens on the
	// device's address (its IPv4 one for "rdma", if it has one); one with
	// a host must be the device's. "" listens where the address says. A
	// device this machine lacks fails Listen with an error naming the
	// devices it has (on a machine without any, the error matches
	// ErrNoDevice).
	Device string
}

// Listen announces on the local address. ctx bounds only the setup, as with
// net.ListenConfig.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (*Listener, error) {
	if err := lc.Config.validate(); err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	laddr, err := resolveAddr(ctx, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rdma", Addr: netAddr(laddr), Err: err}
	}
	if lc.Device != "" {
		if laddr, err = deviceListenAddr(lc.Device, network, laddr); err != nil {
			return nil, &net.OpError{Op: "listen", Net: network, Err: err}
		}
	}
	backlog, pending := lc.limits()
	set := lc.Config.settings()
	set.logger = lc.Logger
	l, err := listen(set, network, laddr, backlog, pending, lc.HandshakeError)
	return l, exportError(err)
}

// limits returns Backlog with its default and MaxPendingHandshakes, both
// capped; a pending of 0 stands for MaxPendingHandshakes's default, which
// the listener sizes for its device (see defaultMaxPending).
func (lc *ListenConfig) limits() (backlog, pending int) {
	backlog = lc.Backlog
	if backlog <= 0 {
		backlog = 128
	}
	return min(backlog, maxBacklog), min(max(lc.MaxPendingHandshakes, 0), maxBacklog)
}

// maxBacklog caps ListenConfig.Backlog: it sizes channels made up front.
// It caps MaxPendingHandshakes alike, and is what a listening id asks of
// the kernel, which caps it far lower (kernelListenBacklog).
const maxBacklog = 65535

func ipWithZone(b net.IP, zone string) netip.Addr {
	ip, _ := netip.AddrFromSlice(b)
	ip = ip.Unmap()
	if ip.Is6() && zone != "" {
		ip = ip.WithZone(zone)
	}
	return ip
}
