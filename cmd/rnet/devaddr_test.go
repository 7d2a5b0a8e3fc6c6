package main

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// labDevices is the lab's listing: rxe0 on rvm0 with RoCE GIDs for its
// addresses, siw0 on rvm2 whose one GID is rvm2's MAC, and an InfiniBand
// port whose GID is in ib0's hardware address.
func labDevices() ([]verbs.DeviceInfo, []netIface) {
	roce := func(ip string, ifindex int) verbs.GIDEntry {
		a := netip.MustParseAddr(ip)
		return verbs.GIDEntry{Type: verbs.GIDTypeRoCEv2, GID: a.As16(), Addr: a, Ifindex: ifindex}
	}
	mac := net.HardwareAddr{0xe6, 0x15, 0xb4, 0xe5, 0x06, 0xe2}
	var siwGID, ibGID [16]byte
	copy(siwGID[:], mac)
	copy(ibGID[:], []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 1, 2, 3})
	infos := []verbs.DeviceInfo{
		{Name: "rxe0", Transport: verbs.TransportRoCE, Ports: []verbs.PortInfo{{Num: 1, GIDs: []verbs.GIDEntry{
			roce("fe80::7c55:86ff:fedc:4cff", 3), roce("10.77.0.1", 3), roce("fd77::1", 3),
		}}}},
		{Name: "siw0", Transport: verbs.TransportIWARP, Ports: []verbs.PortInfo{{Num: 1, GIDs: []verbs.GIDEntry{{GID: siwGID}}}}},
		{Name: "mlx4_0", Transport: verbs.TransportInfiniBand, Ports: []verbs.PortInfo{{Num: 1, GIDs: []verbs.GIDEntry{{GID: ibGID}}}}},
		{Name: "rxe9", Transport: verbs.TransportRoCE, Ports: []verbs.PortInfo{{Num: 1}}},
	}
	ifaces := []netIface{
		{index: 1, name: "lo", addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		{index: 3, name: "rvm0", hw: net.HardwareAddr{0x7e, 0x55, 0x86, 0xdc, 0x4c, 0xff}, addrs: []netip.Addr{netip.MustParseAddr("10.77.0.1")}},
		{index: 5, name: "rvm2", hw: mac, addrs: []netip.Addr{netip.MustParseAddr("fe80::e415:b4ff:fee5:6e2%rvm2"), netip.MustParseAddr("fd78::1"), netip.MustParseAddr("10.78.0.1")}},
		{index: 6, name: "ib0", hw: append(net.HardwareAddr{0, 0, 0x04, 0x48}, ibGID[:]...), addrs: []netip.Addr{netip.MustParseAddr("192.168.7.1")}},
	}
	return infos, ifaces
}

// TestDeviceAddrs: -d finds a device's addresses whatever its transport,
// and says what is wrong when it cannot.
func TestDeviceAddrs(t *testing.T) {
	infos, ifaces := labDevices()
	for _, c := range []struct {
		device string
		want   string // addresses, or the error's words
		err    bool
	}{
		{"rxe0", "fe80::7c55:86ff:fedc:4cff%rvm0, 10.77.0.1, fd77::1", false},
		{"siw0", "fe80::e415:b4ff:fee5:6e2%rvm2, fd78::1, 10.78.0.1", false},
		{"mlx4_0", "192.168.7.1", false},
		{"rxe9", "-d rxe9: the device has no IP address to bind to", true},
		{"mlx5_0", "-d mlx5_0: no such RDMA device here; the devices are rxe0, siw0, mlx4_0, rxe9", true},
	} {
		addrs, err := deviceAddrs(c.device, infos, ifaces)
		switch {
		case c.err && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("deviceAddrs(%s) = %v, %v; want an error saying %q", c.device, addrs, err, c.want)
		case !c.err && (err != nil || joinAddrs(addrs) != c.want):
			t.Errorf("deviceAddrs(%s) = %s, %v; want %s", c.device, joinAddrs(addrs), err, c.want)
		}
	}
}

// TestDeviceAddrPicked: a client binds the device's address of its
// server's family, a server the one its address asks for.
func TestDeviceAddrPicked(t *testing.T) {
	infos, ifaces := labDevices()
	siw, err := deviceAddrs("siw0", infos, ifaces)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		family int
		want   string
	}{{0, "10.78.0.1"}, {4, "10.78.0.1"}, {6, "fd78::1"}} {
		if got, ok := pickAddr(siw, c.family); !ok || got.String() != c.want {
			t.Errorf("pickAddr(siw0, IPv%d) = %v, %v; want %s", c.family, got, ok, c.want)
		}
	}
	linkLocalOnly := []netip.Addr{netip.MustParseAddr("fe80::1%rvm0")}
	if _, ok := pickAddr(linkLocalOnly, 4); ok {
		t.Error("pickAddr found an IPv4 address among IPv6 ones")
	}
	if got, ok := pickAddr(linkLocalOnly, 6); !ok || got.String() != "fe80::1%rvm0" {
		t.Errorf("pickAddr(link-local only, 6) = %v, %v", got, ok)
	}

	for _, c := range []struct {
		addr, want string // want: the address, or the error's words
		usage      bool
	}{
		{":7471", "10.78.0.1:7471", false},
		{"0.0.0.0:7471", "10.78.0.1:7471", false},
		{"[::]:9000", "[fd78::1]:9000", false},
		{"10.78.0.1:9000", "10.78.0.1:9000", false},
		{"[fd78::1]:9000", "[fd78::1]:9000", false},
		{"[fe80::e415:b4ff:fee5:6e2]:9000", "[fe80::e415:b4ff:fee5:6e2%rvm2]:9000", false},
		{"10.77.0.1:9000", "10.77.0.1 is not the device's address; its addresses are fe80::e415:b4ff:fee5:6e2%rvm2, fd78::1, 10.78.0.1", false},
		{"host.example:9000", "must be an IP address or none", true},
	} {
		got, err := listenAddrOn("siw0", c.addr, siw)
		switch {
		case strings.Contains(c.want, " "):
			if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, errUsage) != c.usage {
				t.Errorf("listenAddrOn(siw0, %s) = %q, %v; want an error saying %q (usage %v)", c.addr, got, err, c.want, c.usage)
			}
		case err != nil || got != c.want:
			t.Errorf("listenAddrOn(siw0, %s) = %q, %v; want %s", c.addr, got, err, c.want)
		}
	}
	v6only := []netip.Addr{netip.MustParseAddr("fd78::1")}
	if _, err := listenAddrOn("x", "0.0.0.0:1", v6only); err == nil || !strings.Contains(err.Error(), "no IPv4 address") {
		t.Errorf("listen on 0.0.0.0 with an IPv6-only device: %v", err)
	}
}

// TestDeviceFlagWithoutDevices: on a machine without RDMA, -d fails every
// command with the reason (exit 1, not a usage error).
func TestDeviceFlagWithoutDevices(t *testing.T) {
	if _, err := verbs.Devices(); !errors.Is(err, verbs.ErrNoDevice) && !errors.Is(err, verbs.ErrNotSupported) {
		t.Skipf("this machine has RDMA devices (%v)", err)
	}
	for _, args := range [][]string{
		{"devices", "-d", "rxe0"}, {"perf", "-s", "-d", "rxe0"}, {"perf", "-c", "10.77.0.2", "-d", "rxe0"},
		{"ping", "10.77.0.2", "-d", "rxe0"}, {"scale", "-c", "10.77.0.2", "-d", "rxe0"}, {"perf", "-c", "10.77.0.2", "-d", "rxe0", "-tcp"},
	} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if msg := errb.String(); code != 1 || !(strings.Contains(msg, "no RDMA device") || strings.Contains(msg, "no RDMA support")) {
			t.Errorf("rnet %q without a device: exit %d, stderr %q", args, code, msg)
		}
	}
}
