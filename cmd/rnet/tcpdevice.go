package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/rnet-dev/rnet/rnet"
)

// Over RDMA, -d DEVICE is rnet's Dialer.Device and ListenConfig.Device.
// The TCP baseline (-tcp) binds to the same address those would, from the
// device's addresses as rnet lists them, so the two run on one NIC.

// deviceAndFrom is the usage error of a command line that picks the local
// address twice.
const deviceAndFrom = "-d and -from exclude each other: each picks the local address"

// tcpListenOnDevice applies -d to a TCP listen on addr as
// ListenConfig.Device does: no host, or an unspecified one, becomes the
// device's first address; a given one must be the device's.
func tcpListenOnDevice(device, addr string) (string, error) {
	addrs, err := rnet.DeviceAddrs(device)
	if err != nil {
		return "", explain(err, addr)
	}
	return listenAddrOn(device, addr, addrs)
}

// listenAddrOn is tcpListenOnDevice for a device with the addresses addrs.
func listenAddrOn(device, addr string, addrs []netip.Addr) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if host == "" {
		return net.JoinHostPort(addrs[0].String(), port), nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", usageErrorf("-d %s: the address to listen on must be an IP address or none, not %q", device, host)
	}
	switch {
	case ip.IsUnspecified():
		return net.JoinHostPort(addrs[0].String(), port), nil
	case !slices.Contains(addrs, ip.WithZone("").Unmap()):
		return "", fmt.Errorf("-d %s: %s is not an address of RDMA device %q (%s)", device, host, device, joinAddrs(addrs))
	}
	return addr, nil
}

// tcpDialFromDevice applies -d to a TCP dial of addr (host:port) as
// Dialer.Device does: the device's address of the server's family to dial
// from, and the server's address to dial (a host name resolved to one of
// a family the device has).
func tcpDialFromDevice(ctx context.Context, device, addr string) (from netip.Addr, to string, err error) {
	addrs, err := rnet.DeviceAddrs(device)
	if err != nil {
		return netip.Addr{}, "", explain(err, addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.Addr{}, "", err
	}
	peers := []netip.Addr{}
	if ip, err := netip.ParseAddr(host); err == nil {
		peers = append(peers, ip)
	} else if peers, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return netip.Addr{}, "", fmt.Errorf("-d %s: resolving %s: %w", device, host, err)
	}
	if from, peer, ok := pickFrom(addrs, peers); ok {
		return from, net.JoinHostPort(peer.String(), port), nil
	}
	return netip.Addr{}, "", fmt.Errorf("-d %s: RDMA device %q has no address of the family of %s (it has %s)", device, device, host, joinAddrs(addrs))
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// pickFrom picks the first of peers of a family the device has, and the
// device's first address of that family.
func pickFrom(addrs, peers []netip.Addr) (from, peer netip.Addr, ok bool) {
	for _, peer := range peers {
		for _, a := range addrs {
			if a.Is4() == peer.Unmap().Is4() {
				return a, peer, true
			}
		}
	}
	return netip.Addr{}, netip.Addr{}, false
}
