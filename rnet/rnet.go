package rnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"
)

// Listen announces on the local RDMA address, as net.Listen does for TCP.
// network is "rdma", "rdma4" or "rdma6"; address is "host:port" where host is
// the IP address of an RDMA-capable interface (or empty, for every device).
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

// Dialer holds options for connecting. The zero value is ready to use.
type Dialer struct {
	// Config sizes the connection; nil means the defaults.
	Config *Config
	// Timeout bounds the whole connect (address and route resolution, the
	// connection handshake). 0 means no limit beyond the context's; the
	// resolution steps still give up after rsocket's retries (about a minute).
	Timeout time.Duration
	// LocalAddr is the local address to connect from: it picks the RDMA
	// device. An *Addr, a *net.TCPAddr, a *net.IPAddr, or anything whose
	// String() is "host:port" or an IP address. nil lets the routing table
	// choose.
	LocalAddr net.Addr
}

// Dial connects to address.
func (d *Dialer) Dial(network, address string) (*Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address, honouring ctx as net.Dialer does.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (*Conn, error) {
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	raddr, err := resolveAddr(ctx, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if !raddr.Addr().IsValid() || raddr.Addr().IsUnspecified() {
		return nil, &net.OpError{Op: "dial", Net: "rdma", Addr: netAddr(raddr), Err: errors.New("missing address to dial")}
	}
	var laddr netip.Addr
	if d.LocalAddr != nil {
		if laddr, err = localIP(d.LocalAddr); err != nil {
			return nil, &net.OpError{Op: "dial", Net: "rdma", Addr: netAddr(raddr), Err: err}
		}
	}
	return dial(ctx, d.Config.settings(), laddr, raddr)
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
	// Backlog is how many connection requests may wait in the connection
	// manager, and how many handshakes and accepted-but-unclaimed
	// connections the Listener holds. 0 means 128.
	Backlog int
}

// Listen announces on the local address. ctx bounds only the setup, as with
// net.ListenConfig.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (*Listener, error) {
	laddr, err := resolveAddr(ctx, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rdma", Addr: netAddr(laddr), Err: err}
	}
	backlog := lc.Backlog
	if backlog <= 0 {
		backlog = 128
	}
	return listen(lc.Config.settings(), laddr, backlog)
}

func ipWithZone(b net.IP, zone string) netip.Addr {
	ip, _ := netip.AddrFromSlice(b)
	ip = ip.Unmap()
	if ip.Is6() && zone != "" {
		ip = ip.WithZone(zone)
	}
	return ip
}
