package rnet

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// A device picked by name (Dialer.Device, ListenConfig.Device) stands for
// its IP addresses: the connection manager picks the device by the local
// address, so rnet dials from, or listens on, one of the named device's.

// DeviceAddrs returns the IP addresses of the RDMA device name (such as
// "mlx5_0" or "rxe0"), those Dialer.Device and ListenConfig.Device pick
// from: IPv4 ones first, link-local ones left out. It lets other traffic,
// such as a TCP baseline, use the same device. A device this machine lacks
// gives an error naming the devices it has (on a machine without any, the
// error matches ErrNoDevice).
func DeviceAddrs(name string) ([]netip.Addr, error) {
	addrs, err := deviceAddrs(name)
	return addrs, exportError(err)
}

// deviceAddrs is DeviceAddrs with the internal packages' errors; a
// variable, so that tests can count the lookups.
var deviceAddrs = func(name string) ([]netip.Addr, error) {
	infos, err := verbs.Devices()
	return findDeviceAddrs(infos, err, name, hostInterfaces())
}

// findDeviceAddrs is DeviceAddrs over a device listing (cut short if
// listErr is not nil): the addresses the device's RoCE GIDs stand for and
// those of the network interfaces its GIDs belong to, found by the GID's
// ifindex or, where the kernel gives none, by hardware address (an iWARP
// GID begins with the netdev's MAC, an IPoIB hardware address ends with
// the port's GID). Link-local addresses are left out: they need a zone,
// and the device has a global address wherever it can be reached from off
// the link.
func findDeviceAddrs(infos []verbs.DeviceInfo, listErr error, name string, ifaces []netInterface) ([]netip.Addr, error) {
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
				for _, ifc := range ifaces {
					if (g.Ifindex > 0 && g.Ifindex == ifc.index) || (!g.Addr.IsValid() && gidNamesNetdev(g.GID, ifc.hw)) {
						for _, a := range ifc.addrs {
							add(a)
						}
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
	if listErr != nil {
		// The device may be among those the listing did not reach.
		return nil, listErr
	}
	if len(names) == 0 {
		return nil, ErrNoDevice
	}
	return nil, &noSuchDeviceError{name: name, present: names}
}

// gidNamesNetdev reports whether a GID that stands for no IP address
// belongs to the netdev with hardware address hw.
func gidNamesNetdev(gid [16]byte, hw net.HardwareAddr) bool {
	switch len(hw) {
	case 6: // iWARP: the MAC, then zeros
		return bytes.Equal(gid[:6], hw) && gid != [16]byte{} && bytes.Count(gid[6:], []byte{0}) == 10
	case 20: // IPoIB: flags and QPN, then the GID
		return bytes.Equal(gid[:], hw[4:])
	}
	return false
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

// netInterface is a network interface as findDeviceAddrs needs it.
type netInterface struct {
	index int
	hw    net.HardwareAddr
	addrs []netip.Addr
}

// hostInterfaces lists this machine's network interfaces.
func hostInterfaces() []netInterface {
	ifcs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	out := make([]netInterface, 0, len(ifcs))
	for _, ifc := range ifcs {
		n := netInterface{index: ifc.Index, hw: ifc.HardwareAddr}
		ifaddrs, _ := ifc.Addrs()
		for _, a := range ifaddrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
					n.addrs = append(n.addrs, ip.Unmap())
				}
			}
		}
		out = append(out, n)
	}
	return out
}

// deviceAddrsFresh is how long a dial trusts a device's addresses looked
// up for an earlier one, unless a dial fails meanwhile.
const deviceAddrsFresh = 10 * time.Second

// dialDeviceAddrs keeps the addresses of the devices Dialers name, so that
// a dial does not list every device of the machine (a Dialer making
// thousands of connections would pay that each time). An entry goes when
// it is deviceAddrsFresh old or a dial with the device fails, whose cause
// may be an address that moved.
var dialDeviceAddrs struct {
	mu     sync.Mutex
	byName map[string]deviceAddrsEntry // guarded by mu
}

type deviceAddrsEntry struct {
	addrs  []netip.Addr
	listed time.Time
}

// cachedDeviceAddrs is deviceAddrs, from dialDeviceAddrs while fresh. A
// failed lookup is not kept.
func cachedDeviceAddrs(name string) ([]netip.Addr, error) {
	dialDeviceAddrs.mu.Lock()
	e, ok := dialDeviceAddrs.byName[name]
	dialDeviceAddrs.mu.Unlock()
	if ok && time.Since(e.listed) < deviceAddrsFresh {
		return e.addrs, nil
	}
	addrs, err := deviceAddrs(name)
	if err != nil {
		return nil, err
	}
	dialDeviceAddrs.mu.Lock()
	if dialDeviceAddrs.byName == nil {
		dialDeviceAddrs.byName = make(map[string]deviceAddrsEntry)
	}
	dialDeviceAddrs.byName[name] = deviceAddrsEntry{addrs: addrs, listed: time.Now()}
	dialDeviceAddrs.mu.Unlock()
	return addrs, nil
}

// forgetDeviceAddrs makes the next dial with device name look it up again.
func forgetDeviceAddrs(name string) {
	dialDeviceAddrs.mu.Lock()
	delete(dialDeviceAddrs.byName, name)
	dialDeviceAddrs.mu.Unlock()
}

// deviceLocal applies Dialer.Device to a dial of raddrs from laddr (if
// valid): it returns the addresses the device can reach (those of a family
// it has an address of) and the local address to dial each from.
func deviceLocal(device string, laddr netip.Addr, raddrs []netip.AddrPort) (kept []netip.AddrPort, from func(netip.Addr) netip.Addr, err error) {
	addrs, err := cachedDeviceAddrs(device)
	if err != nil {
		return nil, nil, err
	}
	return localOn(device, addrs, laddr, raddrs)
}

// localOn is deviceLocal for a device with the addresses addrs.
func localOn(device string, addrs []netip.Addr, laddr netip.Addr, raddrs []netip.AddrPort) (kept []netip.AddrPort, from func(netip.Addr) netip.Addr, err error) {
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
	return listenAddrOn(device, addrs, network, laddr)
}

// listenAddrOn is deviceListenAddr for a device with the addresses addrs.
func listenAddrOn(device string, addrs []netip.Addr, network string, laddr netip.AddrPort) (netip.AddrPort, error) {
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
