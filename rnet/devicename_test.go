package rnet

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// Two devices as the lab has them: a RoCE one whose GIDs give its
// addresses, and an iWARP one whose addresses come from its netdev.
var labDevices = []verbs.DeviceInfo{
	{Name: "rxe0", Ports: []verbs.PortInfo{{Num: 1, GIDs: []verbs.GIDEntry{
		{Index: 0, Addr: netip.MustParseAddr("fe80::1"), Ifindex: 3},
		{Index: 1, Addr: netip.MustParseAddr("fd77::1"), Ifindex: 3},
		{Index: 2, Addr: netip.MustParseAddr("10.77.0.1"), Ifindex: 3},
	}}}},
	{Name: "siw0", Ports: []verbs.PortInfo{{Num: 1, GIDs: []verbs.GIDEntry{{Index: 0, Ifindex: 5}}}}},
}

func labIfAddrs(ifindex int) []netip.Addr {
	switch ifindex {
	case 3:
		return []netip.Addr{netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("fe80::1")}
	case 5:
		return []netip.Addr{netip.MustParseAddr("10.78.0.1")}
	}
	return nil
}

func TestFindDeviceAddrs(t *testing.T) {
	for name, want := range map[string][]string{
		"rxe0": {"10.77.0.1", "fd77::1"},
		"siw0": {"10.78.0.1"},
	} {
		got, err := findDeviceAddrs(labDevices, name, labIfAddrs)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, a := range got {
			s = append(s, a.String())
		}
		if !slices.Equal(s, want) {
			t.Errorf("%s: addresses %v, want %v", name, s, want)
		}
	}
	_, err := findDeviceAddrs(labDevices, "mlx5_0", labIfAddrs)
	if err == nil || !strings.Contains(err.Error(), `"mlx5_0"`) || !strings.Contains(err.Error(), "rxe0, siw0") {
		t.Errorf("absent device: %v; want an error naming it and the devices present", err)
	}
	if errors.Is(err, ErrNoDevice) {
		t.Errorf("absent device on a machine with devices: %v matches ErrNoDevice", err)
	}
	if _, err := findDeviceAddrs(nil, "rxe0", labIfAddrs); !errors.Is(err, ErrNoDevice) {
		t.Errorf("a device asked for on a machine without any: %v, want ErrNoDevice", err)
	}
	noIP := []verbs.DeviceInfo{{Name: "rxe9", Ports: []verbs.PortInfo{{Num: 1}}}}
	if _, err := findDeviceAddrs(noIP, "rxe9", labIfAddrs); err == nil || !strings.Contains(err.Error(), "no IP address") {
		t.Errorf("device without addresses: %v", err)
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
