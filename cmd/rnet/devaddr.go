package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// -d DEVICE binds a command to a device's IP address: rdma_cm picks the
// device from the address a connection is bound to, so the address is how
// a device is chosen.

// netIface is a network interface as deviceAddrs needs it.
type netIface struct {
	index int
	name  string
	hw    net.HardwareAddr
	addrs []netip.Addr
}

func hostIfaces() []netIface {
	ifcs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	out := make([]netIface, 0, len(ifcs))
	for _, ifc := range ifcs {
		n := netIface{index: ifc.Index, name: ifc.Name, hw: ifc.HardwareAddr}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				addr := p.Addr()
				if addr.Is6() && addr.IsLinkLocalUnicast() {
					addr = addr.WithZone(ifc.Name)
				}
				n.addrs = append(n.addrs, addr)
			}
		}
		out = append(out, n)
	}
	return out
}

// deviceAddrs lists the IP addresses of the named device: those its RoCE
// GIDs stand for, and for a port whose GIDs name none (iWARP, InfiniBand)
// those of its netdev, found by hardware address (an iWARP GID begins with
// the netdev's MAC, an IPoIB hardware address ends with the port's GID).
func deviceAddrs(name string, infos []verbs.DeviceInfo, ifaces []netIface) ([]netip.Addr, error) {
	i := slices.IndexFunc(infos, func(d verbs.DeviceInfo) bool { return d.Name == name })
	if i < 0 {
		return nil, noSuchDevice(name, infos)
	}
	var addrs []netip.Addr
	add := func(a netip.Addr) {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	for _, p := range infos[i].Ports {
		named := false
		for _, g := range p.GIDs {
			if g.Addr.IsValid() {
				a := g.Addr
				if a.Is6() && a.IsLinkLocalUnicast() {
					a = a.WithZone(ifaceName(ifaces, g.Ifindex))
				}
				add(a)
				named = true
			}
		}
		if named {
			continue
		}
		for _, g := range p.GIDs {
			for _, ifc := range ifaces {
				if gidNamesNetdev(g.GID, ifc.hw) {
					for _, a := range ifc.addrs {
						add(a)
					}
				}
			}
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("-d %s: the device has no IP address to bind to (give its interface an address, or use -from IP)", name)
	}
	return addrs, nil
}

func noSuchDevice(name string, infos []verbs.DeviceInfo) error {
	names := make([]string, len(infos))
	for i, d := range infos {
		names[i] = d.Name
	}
	return fmt.Errorf("-d %s: no such RDMA device here; the devices are %s (see rnet devices)", name, strings.Join(names, ", "))
}

// ifaceName is the name of the interface with the index, the zone of a
// link-local GID's address.
func ifaceName(ifaces []netIface, index int) string {
	for _, ifc := range ifaces {
		if ifc.index == index && index > 0 {
			return ifc.name
		}
	}
	return ""
}

// gidNamesNetdev reports whether a non-RoCE GID belongs to the netdev with
// hardware address hw.
func gidNamesNetdev(gid [16]byte, hw net.HardwareAddr) bool {
	switch len(hw) {
	case 6: // iWARP: the MAC, then zeros
		return bytes.Equal(gid[:6], hw) && gid != [16]byte{} && bytes.Count(gid[6:], []byte{0}) == 10
	case 20: // IPoIB: flags and QPN, then the GID
		return bytes.Equal(gid[:], hw[4:])
	}
	return false
}

// pickAddr picks the address to bind among a device's for a peer of the
// given family (IPv4 if 4, IPv6 if 6, else either): IPv4 before IPv6, a
// global address before a link-local one.
func pickAddr(addrs []netip.Addr, family int) (netip.Addr, bool) {
	best, found := netip.Addr{}, false
	rank := func(a netip.Addr) int {
		r := 0
		if a.Is6() {
			r += 2
		}
		if a.IsLinkLocalUnicast() {
			r++
		}
		return r
	}
	for _, a := range addrs {
		if family == 4 && !a.Is4() || family == 6 && !a.Is6() {
			continue
		}
		if !found || rank(a) < rank(best) {
			best, found = a, true
		}
	}
	return best, found
}

func family(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 4
	}
	return 6
}

// listDevices lists the machine's devices for -d.
func listDevices() ([]verbs.DeviceInfo, error) {
	infos, err := verbs.Devices()
	if err != nil && len(infos) == 0 {
		return nil, explainDevices(err)
	}
	return infos, nil
}

// dialFromDevice resolves -d for a client that dials addr (host:port): the
// device's address to dial from, of the family of the server's address,
// and the address to dial (a host name resolved to an IP of that family).
func dialFromDevice(device, addr string) (from, to string, err error) {
	infos, err := listDevices()
	if err != nil {
		return "", "", err
	}
	addrs, err := deviceAddrs(device, infos, hostIfaces())
	if err != nil {
		return "", "", err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", err
	}
	var peers []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		peers = []netip.Addr{ip}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), dialLimit)
		defer cancel()
		if peers, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
			return "", "", fmt.Errorf("-d %s: resolving %s: %w", device, host, err)
		}
	}
	for _, peer := range peers {
		if local, ok := pickAddr(addrs, family(peer)); ok {
			return local.String(), net.JoinHostPort(peer.String(), port), nil
		}
	}
	return "", "", fmt.Errorf("-d %s: the device's addresses (%s) are not of the family of %s's", device, joinAddrs(addrs), host)
}

// listenOnDevice resolves -d for a server that listens on addr: an
// unspecified host becomes the device's address (of its family, "::" asks
// for IPv6), and a given one must be the device's.
func listenOnDevice(device, addr string) (string, error) {
	infos, err := listDevices()
	if err != nil {
		return "", err
	}
	addrs, err := deviceAddrs(device, infos, hostIfaces())
	if err != nil {
		return "", err
	}
	return listenAddrOn(device, addr, addrs)
}

func listenAddrOn(device, addr string, addrs []netip.Addr) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	ip := netip.IPv4Unspecified()
	fam := 0 // no host: either family
	if host != "" {
		if ip, err = netip.ParseAddr(host); err != nil {
			return "", usageErrorf("-d %s: the address to listen on must be an IP address or none, not %q", device, host)
		}
		fam = family(ip)
	}
	if ip.IsUnspecified() {
		a, ok := pickAddr(addrs, fam)
		if !ok {
			return "", fmt.Errorf("-d %s: the device has no IPv%d address (it has %s)", device, fam, joinAddrs(addrs))
		}
		return net.JoinHostPort(a.String(), port), nil
	}
	for _, a := range addrs {
		if a.WithZone("") == ip.WithZone("").Unmap() {
			if ip.Zone() == "" {
				ip = ip.WithZone(a.Zone())
			}
			return net.JoinHostPort(ip.String(), port), nil
		}
	}
	return "", fmt.Errorf("-d %s: %s is not the device's address; its addresses are %s", device, host, joinAddrs(addrs))
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// deviceAndFrom is the usage error of a command line that picks the local
// address twice.
const deviceAndFrom = "-d and -from exclude each other: each picks the local address"
