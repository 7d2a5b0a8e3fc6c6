// Package rnettest connects rnet Conns in memory, for testing code that uses
// rnet on machines without an RDMA device, as grpc-go's bufconn does for
// TCP. Listen and Dial return real *rnet.Listener and *rnet.Conn values:
// the same Read, Write, deadlines, CloseWrite, Close and errors as over a
// device, with the bytes carried by rnet's own protocol engine over a
// simulated fabric inside the process instead of by an adapter.
//
// A Fabric is an isolated address space: a Listener on one is reached only
// by Dials on the same one, so parallel tests that each make their own
// (NewFabric) never see each other's listeners. The package-level Listen,
// Dial and DialContext use one process-wide Fabric, for code that cannot be
// handed one.
//
// A Dialer dials with a Config of its own for its end, as an rnet.Dialer
// does, while the accepting end keeps the Fabric's: a test can dial one
// Listener with different Configs, as bufconn users pass per-dial options.
//
//	d := &rnettest.Dialer{Fabric: f, Config: &rnet.Config{SendBufferSize: 4096}}
//	c, err := d.Dial("rdma", ln.Addr().String())
//
// Addresses are "host:port" with an IP address (or "localhost") as host,
// on the networks "rdma", "rdma4" and "rdma6", as rnet.Listen takes them.
// An empty host listens on every address of the Fabric ("[::]:port", or
// "0.0.0.0:port" on "rdma4") and dials the loopback address; port 0
// listens on a free port. A Dial to an address nobody listens on fails as a
// device's does: with an *rnet.RejectError that matches
// syscall.ECONNREFUSED, inside a *net.OpError. So does one to a Listener
// whose backlog of connections waiting for Accept is full.
//
// The connections carry no device, so the errors that only a device makes
// (ErrDeviceRemoved, ErrLockedMemory) never occur, and nothing is measured
// here about speed: the simulated fabric copies memory. A test makes a
// connection fail or stall with the Fabric's faults: Cut, VanishPeer (a
// completion error), HoldCredits and Delay. Pipe makes a connection
// without a Listener, as net.Pipe does.
//
// rnettest reaches rnet's internal constructors through an internal
// package (internal/rnetsim) that rnet fills in when it initialises, so
// rnet's own API has nothing in it for testing.
package rnettest

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"weak"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/rnetsim"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/stream"
	"github.com/rnet-dev/rnet/rnet"
)

// Backlog is how many established connections a Listener holds for Accept
// before it refuses more, rnet.ListenConfig's default.
const Backlog = 128

// Ephemeral ports a Dial takes its local address's port from.
const (
	firstEphemeralPort = 49152
	ephemeralPorts     = 65536 - firstEphemeralPort
)

// Fabric is an in-memory network of rnet connections. Its methods may be
// called from any goroutine.
type Fabric struct {
	cfg *rnet.Config

	mu        sync.Mutex
	listeners map[netip.AddrPort]*listening
	dials     uint32                           // dials so far, which picks the next local port
	ends      map[weak.Pointer[rnet.Conn]]*end // every connection's ends, for faults.go
}

// listening is one Listener's entry in its Fabric.
type listening struct {
	offer func(net.Conn) bool

	// mu orders deliveries before the Listener's Close drains its queue:
	// a connection queued after the drain would never be closed.
	mu     sync.Mutex
	closed bool
}

// deliver queues c for the Listener's Accept; false if it cannot take it.
func (e *listening) deliver(c *rnet.Conn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.closed && e.offer(c)
}

// close refuses every later delivery; it returns once none is under way.
func (e *listening) close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
}

// NewFabric returns an empty Fabric whose connections are configured by
// cfg at both ends (nil for rnet's defaults), but for the dialling end of
// a Dialer's with a Config of its own.
func NewFabric(cfg *rnet.Config) *Fabric {
	return &Fabric{
		cfg:       cfg,
		listeners: make(map[netip.AddrPort]*listening),
	}
}

var defaultFabric = sync.OnceValue(func() *Fabric { return NewFabric(nil) })

// Listen listens on the process-wide Fabric; see Fabric.Listen.
func Listen(network, address string) (*rnet.Listener, error) {
	return defaultFabric().Listen(network, address)
}

// Dial dials on the process-wide Fabric; see Fabric.Dial.
func Dial(network, address string) (*rnet.Conn, error) {
	return defaultFabric().Dial(network, address)
}

// DialContext dials on the process-wide Fabric; see Fabric.DialContext.
func DialContext(ctx context.Context, network, address string) (*rnet.Conn, error) {
	return defaultFabric().DialContext(ctx, network, address)
}

// Listen announces on address in f. Close the Listener to free the address:
// a blocked Accept then returns an error matching net.ErrClosed, and
// connections established but not yet accepted are closed.
func (f *Fabric) Listen(network, address string) (*rnet.Listener, error) {
	addr, err := parseAddr(network, address, true)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rdma", Err: err}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if addr.Port() == 0 {
		if addr, err = f.freePort(addr.Addr()); err != nil {
			return nil, &net.OpError{Op: "listen", Net: "rdma", Addr: rnetAddr(addr), Err: err}
		}
	}
	if f.listeners[addr] != nil {
		return nil, &net.OpError{Op: "listen", Net: "rdma", Addr: rnetAddr(addr),
			Err: &os.SyscallError{Syscall: "rdma_bind_addr", Err: syscall.EADDRINUSE}}
	}
	entry := &listening{}
	ln, offer := rnetsim.Listen(addr, Backlog, func() {
		f.mu.Lock()
		if f.listeners[addr] == entry {
			delete(f.listeners, addr)
		}
		f.mu.Unlock()
		entry.close()
	})
	l, ok := ln.(*rnet.Listener)
	if !ok {
		ln.Close()
		return nil, &net.OpError{Op: "listen", Net: "rdma", Addr: rnetAddr(addr),
			Err: fmt.Errorf("rnettest: package rnet made a %T, not an *rnet.Listener", ln)}
	}
	entry.offer = offer
	f.listeners[addr] = entry
	return l, nil
}

// freePort returns ip with a port no Listener in f uses on any address, so
// that a wildcard and a specific Listener never share a port by chance;
// f.mu is held.
func (f *Fabric) freePort(ip netip.Addr) (netip.AddrPort, error) {
	used := make(map[uint16]bool, len(f.listeners))
	for addr := range f.listeners {
		used[addr.Port()] = true
	}
	for p := firstEphemeralPort; p < 65536; p++ {
		if !used[uint16(p)] {
			return netip.AddrPortFrom(ip, uint16(p)), nil
		}
	}
	return netip.AddrPort{}, fmt.Errorf("rnettest: every port from %d up is listened on: close Listeners", firstEphemeralPort)
}

// DialConn dials the process-wide Fabric; see Fabric.DialConn.
func DialConn(ctx context.Context, network, address string) (net.Conn, error) {
	return defaultFabric().DialConn(ctx, network, address)
}

// Dial connects to address in f; see DialContext.
func (f *Fabric) Dial(network, address string) (*rnet.Conn, error) {
	return f.DialContext(context.Background(), network, address)
}

// DialConn is DialContext returning a net.Conn, with net.Dialer's
// DialContext signature and networks ("tcp", "tcp4" and "tcp6" stand for
// "rdma", "rdma4" and "rdma6"), so that it is the whole of a dialer for
// http.Transport's DialContext, and, with the address's network bound, for
// gRPC's WithContextDialer.
func (f *Fabric) DialConn(ctx context.Context, network, address string) (net.Conn, error) {
	return (&Dialer{Fabric: f, Config: f.cfg}).DialConn(ctx, network, address)
}

// DialContext connects to a Listener at address in f. The connection is
// established, and queued for the Listener's Accept, before it returns, as
// over a device. It fails with an error matching syscall.ECONNREFUSED when
// nothing listens there or the Listener's backlog is full, and with one
// matching ctx's error when ctx is already done.
func (f *Fabric) DialContext(ctx context.Context, network, address string) (*rnet.Conn, error) {
	return f.dial(ctx, network, address, f.cfg)
}

// dial is DialContext with the dialling end configured by cfg.
func (f *Fabric) dial(ctx context.Context, network, address string, cfg *rnet.Config) (*rnet.Conn, error) {
	raddr, err := parseAddr(network, address, false)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "rdma", Err: err}
	}
	if err := ctx.Err(); err != nil {
		return nil, &net.OpError{Op: "dial", Net: "rdma", Addr: rnetAddr(raddr), Err: err}
	}
	f.mu.Lock()
	entry := f.listeners[raddr]
	if entry == nil {
		entry = f.listeners[netip.AddrPortFrom(unspecified(raddr.Addr()), raddr.Port())]
	}
	if entry == nil && raddr.Addr().Is4() {
		entry = f.listeners[netip.AddrPortFrom(netip.IPv6Unspecified(), raddr.Port())]
	}
	laddr := netip.AddrPortFrom(raddr.Addr(), uint16(firstEphemeralPort+f.dials%ephemeralPorts))
	f.dials++
	f.mu.Unlock()
	if entry == nil {
		return nil, refused(laddr, raddr, cm.RejectInvalidServiceID)
	}
	c, s, err := f.pair(laddr, raddr, cfg, f.cfg)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "rdma", Source: rnetAddr(laddr), Addr: rnetAddr(raddr), Err: err}
	}
	if !entry.deliver(s) {
		// Closed side by side: each Close waits for the other end's goodbye.
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		c.Close()
		<-closed
		return nil, refused(laddr, raddr, cm.RejectConsumer)
	}
	return c, nil
}

// pair connects two Conns over a fresh simulated fabric, the first at
// address client configured by clientCfg, the second at server by
// serverCfg.
func (f *Fabric) pair(client, server netip.AddrPort, clientCfg, serverCfg *rnet.Config) (*rnet.Conn, *rnet.Conn, error) {
	cset, err := rnetsim.Settings(clientCfg)
	if err != nil {
		return nil, nil, err
	}
	sset, err := rnetsim.Settings(serverCfg)
	if err != nil {
		return nil, nil, err
	}
	a, b, err := simqp.PairConfigs(cset.Ring, sset.Ring, rnetAddr(client), rnetAddr(server))
	if err != nil {
		return nil, nil, err
	}
	cq, sq := &faultQP{QP: a.QP}, &faultQP{QP: b.QP}
	cs, ss := stream.Start(cq, a.Engine, cset), stream.Start(sq, b.Engine, sset)
	c, err := handle(cs, clientCfg)
	if err != nil {
		ss.Close()
		return nil, nil, err
	}
	s, err := handle(ss, serverCfg)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	f.register(c, s, cs, ss, cq, sq)
	return c, s, nil
}

// handle hands c, configured by cfg, out as package rnet does.
func handle(c *stream.Conn, cfg *rnet.Config) (*rnet.Conn, error) {
	h, err := rnetsim.NewConn(c, cfg)
	if err != nil {
		c.Close()
		return nil, err
	}
	rc, ok := h.(*rnet.Conn)
	if !ok {
		h.Close()
		return nil, fmt.Errorf("rnettest: package rnet handed out a %T, not an *rnet.Conn", h)
	}
	return rc, nil
}

// refused is the error a device's Dial returns when the peer's connection
// manager (status 8: nothing listens) or its application (28) rejects it.
func refused(laddr, raddr netip.AddrPort, status int) error {
	return &net.OpError{Op: "dial", Net: "rdma", Source: rnetAddr(laddr), Addr: rnetAddr(raddr),
		Err: &rnet.RejectError{Addr: raddr.String(), Status: status}}
}

// parseAddr parses address on network; an empty host is the wildcard
// address when listening and loopback when dialling.
func parseAddr(network, address string, listening bool) (netip.AddrPort, error) {
	switch network {
	case "rdma", "rdma4", "rdma6":
	default:
		return netip.AddrPort{}, net.UnknownNetworkError(network)
	}
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("rnettest: port %q in %q is not a number from 0 to 65535", portText, address)
	}
	var ip netip.Addr
	switch {
	case host == "" && listening:
		ip = netip.IPv6Unspecified()
		if network == "rdma4" {
			ip = netip.IPv4Unspecified()
		}
	case host == "" || host == "localhost":
		ip = netip.MustParseAddr("127.0.0.1")
		if network == "rdma6" {
			ip = netip.IPv6Loopback()
		}
	default:
		if ip, err = netip.ParseAddr(host); err != nil {
			return netip.AddrPort{}, fmt.Errorf("rnettest: host %q in %q is not an IP address (the fabric has no names)", host, address)
		}
		ip = ip.Unmap()
	}
	if network == "rdma4" && !ip.Is4() || network == "rdma6" && !ip.Is6() {
		return netip.AddrPort{}, &net.AddrError{Err: "address of the wrong family for " + network, Addr: address}
	}
	if !listening {
		if port == 0 {
			return netip.AddrPort{}, &net.AddrError{Err: "cannot dial port 0", Addr: address}
		}
		if ip.IsUnspecified() && ip.Is4() {
			ip = netip.MustParseAddr("127.0.0.1")
		} else if ip.IsUnspecified() {
			ip = netip.IPv6Loopback()
		}
	}
	return netip.AddrPortFrom(ip, uint16(port)), nil
}

// unspecified is the wildcard address of ip's family.
func unspecified(ip netip.Addr) netip.Addr {
	if ip.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

// rnetAddr is a as the *rnet.Addr a device's errors carry.
func rnetAddr(a netip.AddrPort) net.Addr { return &rnet.Addr{AddrPort: a} }
