package main

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/internal/verbs"
)

func TestHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"":             ":7471",
		"fd77::2":      "[fd77::2]:7471",
		"[fd77::2]":    "[fd77::2]:7471",
		"[fd77::2]:99": "[fd77::2]:99",
		"10.0.0.1":     "10.0.0.1:7471",
		"10.0.0.1:99":  "10.0.0.1:99",
		":99":          ":99",
		"host":         "host:7471",
		"fe80::1%eth0": "[fe80::1%eth0]:7471",
	} {
		if got, err := hostPort(in); err != nil || got != want {
			t.Errorf("hostPort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	// A service name is looked up, as net.Dial does; /etc/services may be
	// missing, so only a name the resolver knows is expected to pass.
	if n, err := net.LookupPort("tcp", "http"); err == nil {
		if got, err := hostPort("host:http"); err != nil || got != "host:"+strconv.Itoa(n) {
			t.Errorf("hostPort(host:http) = %q, %v; want host:%d", got, err, n)
		}
	}
	if _, err := hostPort("host:no-such-service"); err == nil || !strings.Contains(err.Error(), "bad port") {
		t.Errorf("an unknown port name: %v, want a bad-port error", err)
	}
	if _, err := hostPort("host:99999"); err == nil {
		t.Error("port 99999 passed")
	}
}

// TestRDMAAddrMatch: an address is refused only when the listing is complete,
// no RoCE GID names it, and no other kind of device could own it (only RoCE
// GIDs name IPs; a loopback address is owned by none); zones are ignored and
// link-local GIDs match.
func TestRDMAAddrMatch(t *testing.T) {
	roce := verbs.DeviceInfo{Name: "rxe0", Transport: verbs.TransportRoCE, Ports: []verbs.PortInfo{{GIDs: []verbs.GIDEntry{
		{Addr: netip.MustParseAddr("fe80::1")},
		{Addr: netip.MustParseAddr("10.77.0.1")},
		{},
	}}}}
	ib := verbs.DeviceInfo{Name: "mlx5_0", Transport: verbs.TransportInfiniBand, Ports: []verbs.PortInfo{{GIDs: []verbs.GIDEntry{{}}}}}
	for _, tc := range []struct {
		ip       string
		infos    []verbs.DeviceInfo
		complete bool
		want     bool
	}{
		{"10.77.0.1", []verbs.DeviceInfo{roce}, true, true},
		{"::ffff:10.77.0.1", []verbs.DeviceInfo{roce}, true, true},
		{"fe80::1%eth1", []verbs.DeviceInfo{roce}, true, true},
		{"10.77.0.9", []verbs.DeviceInfo{roce}, true, false},
		{"10.77.0.9", []verbs.DeviceInfo{roce}, false, true}, // a device may be missing
		{"10.77.0.9", []verbs.DeviceInfo{roce, ib}, true, true},
		{"10.77.0.9", []verbs.DeviceInfo{ib}, true, true},
		{"127.0.0.1", []verbs.DeviceInfo{roce, ib}, true, false},
		{"::1", []verbs.DeviceInfo{roce, ib}, true, false},
	} {
		ok, all := rdmaAddrMatch(netip.MustParseAddr(tc.ip), tc.infos, tc.complete)
		if ok != tc.want {
			t.Errorf("%s with %d devices (complete %v): %v, want %v", tc.ip, len(tc.infos), tc.complete, ok, tc.want)
		}
		if len(all) != 1 || all[0] != "10.77.0.1 (rxe0)" {
			if tc.infos[0].Name == "rxe0" {
				t.Errorf("listed %q, want only the RoCE device's routable address", all)
			}
		}
	}
}

// TestDevicesPartialListing: a listing cut short prints what it has and fails
// the command, in JSON as in text.
func TestDevicesPartialListing(t *testing.T) {
	infos := []verbs.DeviceInfo{{Name: "rxe0", Transport: verbs.TransportRoCE}}
	cut := errors.New("mlx5_1: ibv_open_device failed")
	for _, json := range []bool{false, true} {
		var out bytes.Buffer
		err := reportDevices(devicesOpts{json: json}, &out, infos, cut)
		if !errors.Is(err, cut) {
			t.Errorf("json %v: error %v, want the cut", json, err)
		}
		if !strings.Contains(out.String(), "rxe0") {
			t.Errorf("json %v: the devices listed were not printed: %q", json, out.String())
		}
	}
}
