package rnet

import (
	"context"
	"net"
	"net/netip"
	"strconv"
)

// Addr is the address of an RDMA endpoint: the IP address of an RDMA-capable
// interface and a port in rdma_cm's TCP port space.
type Addr struct {
	netip.AddrPort
}

// Network returns "rdma".
func (a *Addr) Network() string { return "rdma" }

// String returns "host:port" (with brackets for IPv6), as net.TCPAddr does,
// so that net.SplitHostPort works on it.
func (a *Addr) String() string {
	if a == nil {
		return "<nil>"
	}
	return a.AddrPort.String()
}

// netAddr turns a possibly-zero address into a net.Addr that is never a typed nil.
func netAddr(ap netip.AddrPort) net.Addr {
	return &Addr{ap}
}

// lookupNetIP resolves host names; tests replace it.
var lookupNetIP = net.DefaultResolver.LookupNetIP

// resolveAddr resolves "host:port" for network "rdma", "rdma4" or "rdma6" to
// the one address a Listener binds: the first IPv4 address a host name has,
// else its first, as net.Listen picks.
func resolveAddr(ctx context.Context, network, address string) (netip.AddrPort, error) {
	addrs, err := resolveAddrs(ctx, network, address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	for _, a := range addrs {
		if a.Addr().Is4() {
			return a, nil
		}
	}
	return addrs[0], nil
}

// resolveAddrs resolves "host:port" for network "rdma", "rdma4" or "rdma6" to
// every address that matches the network, in the resolver's order of
// preference. Host names go through the system resolver; RDMA needs an IP
// address in the end. The result is never empty when err is nil.
func resolveAddrs(ctx context.Context, network, address string) ([]netip.AddrPort, error) {
	switch network {
	case "rdma", "rdma4", "rdma6":
	default:
		return nil, net.UnknownNetworkError(network)
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		p, lerr := net.LookupPort("tcp", portStr)
		if lerr != nil {
			return nil, &net.AddrError{Err: "invalid port", Addr: address}
		}
		port = uint64(p)
	}
	var ips []netip.Addr
	if host == "" {
		if network == "rdma6" {
			ips = []netip.Addr{netip.IPv6Unspecified()}
		} else {
			ips = []netip.Addr{netip.IPv4Unspecified()}
		}
	} else if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		if network == "rdma4" && !ip.Is4() || network == "rdma6" && ip.Is4() {
			return nil, &net.AddrError{Err: "address does not match network " + network, Addr: address}
		}
		ips = []netip.Addr{ip}
	} else {
		ipNet := "ip"
		if network == "rdma4" {
			ipNet = "ip4"
		} else if network == "rdma6" {
			ipNet = "ip6"
		}
		found, lerr := lookupNetIP(ctx, ipNet, host)
		if lerr != nil {
			return nil, lerr
		}
		for _, ip := range found {
			ip = ip.Unmap()
			if network == "rdma4" && !ip.Is4() || network == "rdma6" && ip.Is4() {
				continue
			}
			ips = append(ips, ip)
		}
		if len(ips) == 0 {
			return nil, &net.DNSError{Err: "no suitable address", Name: host, IsNotFound: true}
		}
	}
	addrs := make([]netip.AddrPort, len(ips))
	for i, ip := range ips {
		addrs[i] = netip.AddrPortFrom(ip, uint16(port))
	}
	return addrs, nil
}

// bindAddr is where a Listener for network binds laddr. As net.Listen does for
// "tcp", a wildcard address on "rdma" (":7471", "0.0.0.0:7471" or "[::]:7471")
// listens on IPv6 and IPv4 alike, as "[::]" with the IPv6-only option off;
// "rdma6" listens on IPv6 only and "rdma4" on IPv4 only. v6only is meaningful
// only for the IPv6 wildcard; dual says a kernel without IPv6 may fall back to
// the IPv4 wildcard.
func bindAddr(network string, laddr netip.AddrPort) (bind netip.AddrPort, v6only, dual bool) {
	ip := laddr.Addr()
	if !ip.IsUnspecified() {
		return laddr, false, false
	}
	switch network {
	case "rdma4":
		return netip.AddrPortFrom(netip.IPv4Unspecified(), laddr.Port()), false, false
	case "rdma6":
		return netip.AddrPortFrom(netip.IPv6Unspecified(), laddr.Port()), true, false
	}
	return netip.AddrPortFrom(netip.IPv6Unspecified(), laddr.Port()), false, true
}
