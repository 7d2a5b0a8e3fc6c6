package rnet

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// A device picked by name (Dialer.Device, ListenConfig.Device) stands for
// its IP addresses: the connection manager picks the device by the local
// address, so rnet dials from, or listens on, one of the named device's.

// deviceAddrs returns the IP addresses of the RDMA device name, or an
// error naming it and the devices there are.
func deviceAddrs(name string) ([]netip.Addr, error) {
	infos, err := verbs.Devices()
	if err != nil {
		return nil, err
	}
	return findDeviceAddrs(infos, name, interfaceAddrs)
}

// findDeviceAddrs is deviceAddrs over infos: the addresses the device's
// RoCE GIDs stand for and those of the network interfaces its GIDs belong
// to (iWARP devices have only these), IPv4 first, link-local ones left out
// (a link-local address needs a zone the GID table does not give).
func findDeviceAddrs(infos []verbs.DeviceInfo, name string, ifAddrs func(ifindex int) []netip.Addr) ([]netip.Addr, error) {
	var names []string
	for _, d := range infos {
		names = append(names, d.Name)
		if d.Name != name {
			continue
		}
		var addrs []netip.Addr
		add := func(a netip.Addr) {
			a = a.Unmap()
			if a.IsValid() && !a.IsLinkLocalUnicast() && !a.IsUnspecified() && !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		for _, p := range d.Ports {
			for _, g := range p.GIDs {
				add(g.Addr)
				if g.Ifindex > 0 && ifAddrs != nil {
					for _, a := range ifAddrs(g.Ifindex) {
						add(a)
					}
				}
			}
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("rnet: RDMA device %q has no IP address: give its network interface one", name)
		}
		// IPv4 first, as resolveAddr prefers it.
		slices.SortStableFunc(addrs, func(a, b netip.Addr) int {
			switch {
			case a.Is4() == b.Is4():
				return 0
			case a.Is4():
				return -1
			}
			return 1
		})
		return addrs, nil
	}
	if len(names) == 0 {
		return nil, ErrNoDevice
	}
	return nil, &noSuchDeviceError{name: name, present: names}
}

// noSuchDeviceError is a Device that is not among the machine's RDMA
// devices. Unlike a machine without any (ErrNoDevice), it is a mistake in
// the configuration: it does not match ErrNoDevice, so a DialConn with
// TCPFallback and a DualListener fail rather than quietly use TCP.
type noSuchDeviceError struct {
	name    string
	present []string
}

func (e *noSuchDeviceError) Error() string {
	return fmt.Sprintf("rnet: no RDMA device %q on this machine; it has %s", e.name, strings.Join(e.present, ", "))
}

// interfaceAddrs is the IP addresses of the network interface ifindex.
func interfaceAddrs(ifindex int) []netip.Addr {
	ifc, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return nil
	}
	ifaddrs, err := ifc.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range ifaddrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// deviceLocal applies Dialer.Device to a dial of raddrs from laddr (if
// valid): it returns the addresses the device can reach (those of a family
// it has an address of) and the local address to dial each from.
func deviceLocal(device string, laddr netip.Addr, raddrs []netip.AddrPort) (kept []netip.AddrPort, from func(netip.Addr) netip.Addr, err error) {
	addrs, err := deviceAddrs(device)
	if err != nil {
		return nil, nil, err
	}
	if laddr.IsValid() {
		if !slices.Contains(addrs, laddr.WithZone("")) {
			return nil, nil, fmt.Errorf("rnet: LocalAddr %v is not an address of RDMA device %q (%s)", laddr, device, joinAddrs(addrs))
		}
		return raddrs, func(netip.Addr) netip.Addr { return laddr }, nil
	}
	pick := func(remote netip.Addr) netip.Addr {
		for _, a := range addrs {
			if a.Is4() == remote.Unmap().Is4() {
				return a
			}
		}
		return netip.Addr{}
	}
	for _, r := range raddrs {
		if pick(r.Addr()).IsValid() {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		return nil, nil, fmt.Errorf("rnet: RDMA device %q has no address of the family of %v (it has %s)", device, raddrs[0].Addr(), joinAddrs(addrs))
	}
	return kept, pick, nil
}

// deviceListenAddr applies ListenConfig.Device to a listen on laddr for
// network: an unspecified host becomes the device's first address the
// network allows; a given one must be the device's.
func deviceListenAddr(device, network string, laddr netip.AddrPort) (netip.AddrPort, error) {
	addrs, err := deviceAddrs(device)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if ip := laddr.Addr(); ip.IsValid() && !ip.IsUnspecified() {
		if !slices.Contains(addrs, ip.WithZone("")) {
			return netip.AddrPort{}, fmt.Errorf("rnet: %v is not an address of RDMA device %q (%s)", ip, device, joinAddrs(addrs))
		}
		return laddr, nil
	}
	for _, a := range addrs {
		if network == "rdma" || (network == "rdma4") == a.Is4() {
			return netip.AddrPortFrom(a, laddr.Port()), nil
		}
	}
	return netip.AddrPort{}, fmt.Errorf("rnet: RDMA device %q has no address for %s (it has %s)", device, network, joinAddrs(addrs))
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
