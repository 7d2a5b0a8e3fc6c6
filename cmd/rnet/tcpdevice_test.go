package main

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// TestTCPOnDevice: with -tcp, -d binds the baseline where rnet's
// Dialer.Device and ListenConfig.Device would bind the RDMA test: a
// client the device's address of its server's family, a server the
// device's first address or the one it is given, if the device's.
func TestTCPOnDevice(t *testing.T) {
	dev := []netip.Addr{netip.MustParseAddr("10.78.0.1"), netip.MustParseAddr("fd78::1")}
	for _, c := range []struct {
		peers      []string
		from, peer string // "" for none
	}{
		{[]string{"10.77.0.2"}, "10.78.0.1", "10.77.0.2"},
		{[]string{"::ffff:10.77.0.2"}, "10.78.0.1", "::ffff:10.77.0.2"},
		{[]string{"fd77::2"}, "fd78::1", "fd77::2"},
		{[]string{"fd77::2", "10.77.0.2"}, "fd78::1", "fd77::2"},
	} {
		var peers []netip.Addr
		for _, p := range c.peers {
			peers = append(peers, netip.MustParseAddr(p))
		}
		from, peer, ok := pickFrom(dev, peers)
		if !ok || from.String() != c.from || peer.String() != c.peer {
			t.Errorf("pickFrom(%v) = %v, %v, %v; want %s, %s", c.peers, from, peer, ok, c.from, c.peer)
		}
	}
	v4only := []netip.Addr{netip.MustParseAddr("10.78.0.1")}
	if from, peer, ok := pickFrom(v4only, []netip.Addr{netip.MustParseAddr("fd77::2")}); ok {
		t.Errorf("pickFrom found %v -> %v for an IPv6 server on an IPv4-only device", from, peer)
	}

	for _, c := range []struct {
		addr, want string // want: the address, or the error's words
		usage      bool
	}{
		{":7471", "10.78.0.1:7471", false},
		{"0.0.0.0:7471", "10.78.0.1:7471", false},
		{"[::]:9000", "10.78.0.1:9000", false},
		{"10.78.0.1:9000", "10.78.0.1:9000", false},
		{"[fd78::1]:9000", "[fd78::1]:9000", false},
		{"10.77.0.1:9000", `10.77.0.1 is not an address of RDMA device "siw0" (10.78.0.1, fd78::1)`, false},
		{"host.example:9000", "must be an IP address or none", true},
	} {
		got, err := listenAddrOn("siw0", c.addr, dev)
		switch {
		case strings.Contains(c.want, " "):
			if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, errUsage) != c.usage {
				t.Errorf("listenAddrOn(siw0, %s) = %q, %v; want an error saying %q (usage %v)", c.addr, got, err, c.want, c.usage)
			}
		case err != nil || got != c.want:
			t.Errorf("listenAddrOn(siw0, %s) = %q, %v; want %s", c.addr, got, err, c.want)
		}
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
		{"scale", "-s", "-d", "rxe0"}, {"perf", "-s", ":0", "-d", "rxe0", "-tcp"},
	} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if msg := errb.String(); code != 1 || !(strings.Contains(msg, "no RDMA device") || strings.Contains(msg, "no RDMA support")) {
			t.Errorf("rnet %q without a device: exit %d, stderr %q", args, code, msg)
		}
	}
}
