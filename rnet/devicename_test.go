package rnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// The lab's devices and a few more: rxe0, a RoCE device whose GIDs give its
// addresses; siw0, an iWARP device whose GID carries its netdev's ifindex;
// siw1, one whose GID (as older kernels give it) carries only its netdev's
// MAC; mlx4_0, an InfiniBand port whose GID is in ib0's hardware address;
// rxe9, a device without any address.
func labDevices() ([]verbs.DeviceInfo, []netInterface) {
	roce := func(ip string, ifindex int) verbs.GIDEntry {
		a := netip.MustParseAddr(ip)
		return verbs.GIDEntry{Type: verbs.GIDTypeRoCEv2, GID: a.As16(), Addr: a, Ifindex: ifindex}
	}
	mac5 := net.HardwareAddr{0xe6, 0x15, 0xb4, 0xe5, 0x06, 0xe2}
	mac7 := net.HardwareAddr{0xe6, 0x15, 0xb4, 0xe5, 0x06, 0xe7}
	var siw0GID, siw1GID, ibGID [16]byte
	copy(siw0GID[:], mac5)
	copy(siw1GID[:], mac7)
	copy(ibGID[:], []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 1, 2, 3})
	infos := []verbs.DeviceInfo{
		{Name: "rxe0", Transport: verbs.TransportRoCE, Ports: []verbs.PortInfo{{Num: 1, GIDs: []verbs.GIDEntry{
			roce("fe80::7c55:86ff:fedc:4cff", 3), roce("fd77::1", 3), roce("10.77.0.1", 3),
		}}}},
		{Name: "siw0", Transport: verbs.TransportIWARP, Ports: []verbs.PortInfo{{Num: 1, GIDs: []verbs.GIDEntry{{GID: siw0GID, Ifindex: 5}}}}},
		{Name: "siw1", Transport: verbs.TransportIWARP, Ports: []verbs.PortInfo{{Num: 1, GIDs: []verbs.GIDEntry{{GID: siw1GID}}}}},
		{Name: "mlx4_0", Transport: verbs.TransportInfiniBand, Ports: []verbs.PortInfo{{Num: 1, GIDs: []verbs.GIDEntry{{Type: verbs.GIDTypeIB, GID: ibGID}}}}},
		{Name: "rxe9", Transport: verbs.TransportRoCE, Ports: []verbs.PortInfo{{Num: 1}}},
	}
	ifaces := []netInterface{
		{index: 1, addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}},
		{index: 3, hw: net.HardwareAddr{0x7e, 0x55, 0x86, 0xdc, 0x4c, 0xff}, addrs: []netip.Addr{netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("fe80::7c55:86ff:fedc:4cff")}},
		{index: 5, hw: mac5, addrs: []netip.Addr{netip.MustParseAddr("fe80::e415:b4ff:fee5:6e2"), netip.MustParseAddr("fd78::1"), netip.MustParseAddr("10.78.0.1")}},
		{index: 7, hw: mac7, addrs: []netip.Addr{netip.MustParseAddr("10.79.0.1")}},
		{index: 8, hw: append(net.HardwareAddr{0, 0, 0x04, 0x48}, ibGID[:]...), addrs: []netip.Addr{netip.MustParseAddr("192.168.7.1")}},
	}
	return infos, ifaces
}

// TestFindDeviceAddrs: a device's addresses are found whatever its
// transport, IPv4 first and without link-local ones.
func TestFindDeviceAddrs(t *testing.T) {
	infos, ifaces := labDevices()
	for name, want := range map[string][]string{
		"rxe0":   {"10.77.0.1", "fd77::1"},
		"siw0":   {"10.78.0.1", "fd78::1"},
		"siw1":   {"10.79.0.1"},
		"mlx4_0": {"192.168.7.1"},
	} {
		got, err := findDeviceAddrs(infos, nil, name, ifaces)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		var s []string
		for _, a := range got {
			s = append(s, a.String())
		}
		if !slices.Equal(s, want) {
			t.Errorf("%s: addresses %v, want %v", name, s, want)
		}
	}
}

// TestFindDeviceAddrsErrors: what is wrong when a device's addresses
// cannot be found is said, and only a machine without devices matches
// ErrNoDevice.
func TestFindDeviceAddrsErrors(t *testing.T) {
	infos, ifaces := labDevices()
	_, err := findDeviceAddrs(infos, nil, "mlx5_0", ifaces)
	if err == nil || !strings.Contains(err.Error(), `"mlx5_0"`) || !strings.Contains(err.Error(), "rxe0, siw0, siw1, mlx4_0, rxe9") {
		t.Errorf("absent device: %v; want an error naming it and the devices present", err)
	}
	if errors.Is(err, ErrNoDevice) {
		t.Errorf("absent device on a machine with devices: %v matches ErrNoDevice", err)
	}
	if _, err := findDeviceAddrs(nil, nil, "rxe0", ifaces); !errors.Is(err, ErrNoDevice) {
		t.Errorf("a device asked for on a machine without any: %v, want ErrNoDevice", err)
	}
	if _, err := findDeviceAddrs(infos, nil, "rxe9", ifaces); err == nil || !strings.Contains(err.Error(), `"rxe9" has no IP address`) {
		t.Errorf("device without addresses: %v", err)
	}

	// A listing cut short: a device it has is used; one it lacks may be
	// among those it did not reach, so the listing's error is the answer.
	cut := errors.New("mlx5_1: ibv_open_device failed")
	if got, err := findDeviceAddrs(infos[:1], cut, "rxe0", ifaces); err != nil || len(got) != 2 {
		t.Errorf("rxe0 from a listing cut short: %v, %v", got, err)
	}
	if _, err := findDeviceAddrs(infos[:1], cut, "mlx5_1", ifaces); err != cut {
		t.Errorf("a device past a listing cut short: %v, want the listing's error", err)
	}
}

// TestGIDNamesNetdev: an iWARP GID names the netdev whose MAC it begins
// with, an InfiniBand GID the IPoIB netdev whose hardware address ends
// with it; a zero GID names none.
func TestGIDNamesNetdev(t *testing.T) {
	mac := net.HardwareAddr{0xe6, 0x15, 0xb4, 0xe5, 0x06, 0xe2}
	var iwarp, other, ib [16]byte
	copy(iwarp[:], mac)
	copy(other[:], mac)
	other[15] = 1
	copy(ib[:], []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 1, 2, 3})
	ipoib := append(net.HardwareAddr{0, 0, 0x04, 0x48}, ib[:]...)
	for _, c := range []struct {
		gid  [16]byte
		hw   net.HardwareAddr
		want bool
	}{
		{iwarp, mac, true},
		{other, mac, false},
		{[16]byte{}, net.HardwareAddr{0, 0, 0, 0, 0, 0}, false},
		{iwarp, nil, false},
		{ib, ipoib, true},
		{iwarp, ipoib, false},
		{ib, mac, false},
	} {
		if got := gidNamesNetdev(c.gid, c.hw); got != c.want {
			t.Errorf("gidNamesNetdev(%x, %v) = %v, want %v", c.gid, c.hw, got, c.want)
		}
	}
}

// TestDeviceLocal: a dial with a Device goes from the device's address of
// each remote's family, to the remotes of a family it has; a LocalAddr
// must be the device's.
func TestDeviceLocal(t *testing.T) {
	dev := []netip.Addr{netip.MustParseAddr("10.78.0.1"), netip.MustParseAddr("fd78::1")}
	v4 := netip.MustParseAddrPort("10.77.0.2:7471")
	v6 := netip.MustParseAddrPort("[fd77::2]:7471")
	kept, from, err := localOn("siw0", dev, netip.Addr{}, []netip.AddrPort{v6, v4})
	if err != nil || !slices.Equal(kept, []netip.AddrPort{v6, v4}) {
		t.Fatalf("localOn(v6, v4) = %v, %v", kept, err)
	}
	if got := from(v4.Addr()).String(); got != "10.78.0.1" {
		t.Errorf("from for %v = %s, want 10.78.0.1", v4, got)
	}
	if got := from(netip.MustParseAddr("::ffff:10.77.0.2")).String(); got != "10.78.0.1" {
		t.Errorf("from for ::ffff:10.77.0.2 = %s, want 10.78.0.1", got)
	}
	if got := from(v6.Addr()).String(); got != "fd78::1" {
		t.Errorf("from for %v = %s, want fd78::1", v6, got)
	}

	v4only := dev[:1]
	kept, _, err = localOn("siw0", v4only, netip.Addr{}, []netip.AddrPort{v6, v4})
	if err != nil || !slices.Equal(kept, []netip.AddrPort{v4}) {
		t.Errorf("an IPv4-only device keeps %v, %v; want the IPv4 remote alone", kept, err)
	}
	if _, _, err := localOn("siw0", v4only, netip.Addr{}, []netip.AddrPort{v6}); err == nil || !strings.Contains(err.Error(), "no address of the family of fd77::2") {
		t.Errorf("an IPv6 remote from an IPv4-only device: %v", err)
	}

	laddr := netip.MustParseAddr("fd78::1")
	if _, from, err := localOn("siw0", dev, laddr, []netip.AddrPort{v6}); err != nil || from(v6.Addr()) != laddr {
		t.Errorf("LocalAddr of the device: %v", err)
	}
	if _, _, err := localOn("siw0", dev, netip.MustParseAddr("10.77.0.1"), []netip.AddrPort{v4}); err == nil || !strings.Contains(err.Error(), `LocalAddr 10.77.0.1 is not an address of RDMA device "siw0" (10.78.0.1, fd78::1)`) {
		t.Errorf("LocalAddr not of the device: %v", err)
	}
}

// TestDeviceListenAddr: a listen with a Device and no host listens on the
// device's first address the network allows; a given host must be the
// device's.
func TestDeviceListenAddr(t *testing.T) {
	dev := []netip.Addr{netip.MustParseAddr("10.78.0.1"), netip.MustParseAddr("fd78::1")}
	for _, c := range []struct {
		network, laddr, want string // want: the address, or the error's words
	}{
		{"rdma", "0.0.0.0:7471", "10.78.0.1:7471"},
		{"rdma", "[::]:9000", "10.78.0.1:9000"},
		{"rdma6", "[::]:9000", "[fd78::1]:9000"},
		{"rdma4", "0.0.0.0:0", "10.78.0.1:0"},
		{"rdma", "[fd78::1]:9000", "[fd78::1]:9000"},
		{"rdma", "10.77.0.1:9000", `10.77.0.1 is not an address of RDMA device "siw0" (10.78.0.1, fd78::1)`},
	} {
		got, err := listenAddrOn("siw0", dev, c.network, netip.MustParseAddrPort(c.laddr))
		switch {
		case strings.Contains(c.want, " "):
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("listenAddrOn(%s, %s) = %v, %v; want an error saying %q", c.network, c.laddr, got, err, c.want)
			}
		case err != nil || got.String() != c.want:
			t.Errorf("listenAddrOn(%s, %s) = %v, %v; want %s", c.network, c.laddr, got, err, c.want)
		}
	}
	if _, err := listenAddrOn("siw1", dev[:1], "rdma6", netip.MustParseAddrPort("[::]:1")); err == nil || !strings.Contains(err.Error(), "no address for rdma6") {
		t.Errorf("rdma6 on an IPv4-only device: %v", err)
	}
}

// A Dialer or ListenConfig with a Device on a machine without RDMA fails
// before it touches anything, with ErrNoDevice.
func TestDeviceWithoutDevices(t *testing.T) {
	if _, err := verbs.Devices(); !errors.Is(err, ErrNoDevice) {
		t.Skip("this host has RDMA devices")
	}
	_, err := (&Dialer{Device: "rxe0"}).Dial("rdma", "10.77.0.2:7471")
	if !errors.Is(err, ErrNoDevice) {
		t.Errorf("Dial with Device on a host without devices = %v, want ErrNoDevice", err)
	}
	_, err = (&ListenConfig{Device: "rxe0"}).Listen(t.Context(), "rdma", ":0")
	if !errors.Is(err, ErrNoDevice) {
		t.Errorf("Listen with Device on a host without devices = %v, want ErrNoDevice", err)
	}
}

// TestDialerDeviceLooksUpOnce: dials with Dialer.Device reuse the device's
// addresses rather than list the machine's devices each time, and look
// them up again after a dial with the device failed.
func TestDialerDeviceLooksUpOnce(t *testing.T) {
	var lookups int
	orig := deviceAddrs
	deviceAddrs = func(name string) ([]netip.Addr, error) {
		lookups++
		return []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil
	}
	t.Cleanup(func() { deviceAddrs = orig; forgetDeviceAddrs("fake0") })
	raddrs := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.2:7471")}
	for range 3 {
		if _, _, err := deviceLocal("fake0", netip.Addr{}, raddrs); err != nil {
			t.Fatal(err)
		}
	}
	if lookups != 1 {
		t.Errorf("3 dials' device addresses took %d lookups, want 1", lookups)
	}
	// No IPv6 address on the device: this dial fails.
	d := &Dialer{Device: "fake0"}
	if _, err := d.Dial("rdma", "[fd00::2]:7471"); err == nil {
		t.Fatal("a dial of IPv6 from a device with IPv4 alone succeeded")
	}
	if _, _, err := deviceLocal("fake0", netip.Addr{}, raddrs); err != nil {
		t.Fatal(err)
	}
	if lookups != 2 {
		t.Errorf("after a failed dial, %d lookups in all, want 2 (the next dial looks again)", lookups)
	}
	// DialConn's RDMA attempt, falling back to TCP, forgets them too: here
	// the device has no IPv4 address, and a local listener takes the TCP.
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	deviceAddrs = func(name string) ([]netip.Addr, error) {
		lookups++
		return []netip.Addr{netip.MustParseAddr("fd00::1")}, nil
	}
	forgetDeviceAddrs("fake0")
	fb := &Dialer{Device: "fake0", TCPFallback: true}
	c, err := fb.DialConn(context.Background(), "rdma", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, ok := c.(*TCPConn); !ok {
		t.Fatalf("DialConn from a device with IPv6 alone to an IPv4 address made a %T, want a *TCPConn", c)
	}
	if lookups != 3 {
		t.Fatalf("the fallen-back dial took %d lookups in all, want 3", lookups)
	}
	deviceLocal("fake0", netip.Addr{}, []netip.AddrPort{netip.MustParseAddrPort("[fd00::2]:7471")})
	if lookups != 4 {
		t.Errorf("after a DialConn whose RDMA attempt failed, %d lookups in all, want 4 (the next dial looks again)", lookups)
	}
}
