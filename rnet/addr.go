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

// resolveAddr resolves "host:port" for network "rdma", "rdma4" or "rdma6".
// Host names go through the system resolver; RDMA needs an IP address in the end.
func resolveAddr(ctx context.Context, network, address string) (netip.AddrPort, error) {
	switch network {
	case "rdma", "rdma4", "rdma6":
	default:
		return netip.AddrPort{}, net.UnknownNetworkError(network)
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		p, lerr := net.LookupPort("tcp", portStr)
		if lerr != nil {
			return netip.AddrPort{}, &net.AddrError{Err: "invalid port", Addr: address}
		}
		port = uint64(p)
	}
	var ip netip.Addr
	if host == "" {
		if network == "rdma6" {
			ip = netip.IPv6Unspecified()
		} else {
			ip = netip.IPv4Unspecified()
		}
	} else if ip, err = netip.ParseAddr(host); err != nil {
		ipNet := "ip"
		if network == "rdma4" {
			ipNet = "ip4"
		} else if network == "rdma6" {
			ipNet = "ip6"
		}
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, ipNet, host)
		if lerr != nil {
			return netip.AddrPort{}, lerr
		}
		if len(ips) == 0 {
			return netip.AddrPort{}, &net.DNSError{Err: "no suitable address", Name: host, IsNotFound: true}
		}
		ip = ips[0]
	}
	ip = ip.Unmap()
	if network == "rdma4" && !ip.Is4() || network == "rdma6" && ip.Is4() {
		return netip.AddrPort{}, &net.AddrError{Err: "address does not match network " + network, Addr: address}
	}
	return netip.AddrPortFrom(ip, uint16(port)), nil
}
