package rnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
)

func TestResolveAddr(t *testing.T) {
	for _, tc := range []struct {
		network, address string
		want             string // "" means an error
	}{
		{"rdma", "10.0.0.1:7471", "10.0.0.1:7471"},
		{"rdma", "[fd77::2]:7471", "[fd77::2]:7471"},
		{"rdma", "[::ffff:10.0.0.1]:1", "10.0.0.1:1"},
		{"rdma", ":7471", "0.0.0.0:7471"},
		{"rdma6", ":7471", "[::]:7471"},
		{"rdma4", "[fd77::2]:1", ""},
		{"rdma6", "10.0.0.1:1", ""},
		{"rdma", "10.0.0.1", ""},
		{"rdma", "10.0.0.1:99999", ""},
		{"tcp", "10.0.0.1:1", ""},
		{"rdma", "localhost:1", "127.0.0.1:1"},
	} {
		got, err := resolveAddr(context.Background(), tc.network, tc.address)
		if tc.want == "" {
			if err == nil {
				t.Errorf("resolveAddr(%q, %q) = %v, want an error", tc.network, tc.address, got)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("resolveAddr(%q, %q) = %v, %v; want %s", tc.network, tc.address, got, err, tc.want)
		}
	}
	var unknown net.UnknownNetworkError
	if _, err := resolveAddr(context.Background(), "udp", "1.2.3.4:5"); !errors.As(err, &unknown) {
		t.Errorf("unknown network error = %v", err)
	}
}

func TestAddrIsNetAddr(t *testing.T) {
	a := netAddr(netip.MustParseAddrPort("[fd77::2]:7471"))
	host, port, err := net.SplitHostPort(a.String())
	if a.Network() != "rdma" || err != nil || host != "fd77::2" || port != "7471" {
		t.Fatalf("Addr %q network %q: split %q %q %v", a, a.Network(), host, port, err)
	}
}

func TestConfigDefaults(t *testing.T) {
	var c *Config
	s := c.settings()
	if s.ring.SendBufSize != 128<<10 || s.ring.RecvBufSize != 128<<10 || s.ring.SQSize != 384 || s.ring.RQSize != 384 || s.ring.InlineThreshold != 64 {
		t.Errorf("nil Config = %+v, want rsocket's defaults", s.ring)
	}
	if s.busyPoll <= 0 || s.keepAlive <= 0 || s.linger <= 0 || s.handshakeTimeout <= 0 {
		t.Errorf("nil Config durations = %+v", s)
	}
	s = (&Config{InlineThreshold: -1, BusyPoll: -1, KeepAlive: -1}).settings()
	if s.ring.InlineThreshold >= 0 && s.ring.InlineThreshold != 0 || s.busyPoll != 0 || s.keepAlive != 0 {
		t.Errorf("negative values must disable: %+v", s)
	}
}

// TestLocalIP: a Dialer's LocalAddr keeps its IPv6 zone, as net.Dialer's
// does (a link-local source needs it), and a typed nil means none.
func TestLocalIP(t *testing.T) {
	for _, tc := range []struct {
		a    net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth1"}, "fe80::1%eth1"},
		{&net.IPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth1"}, "fe80::1%eth1"},
		{net.TCPAddrFromAddrPort(netip.MustParseAddrPort("[fe80::1%eth1]:0")), "fe80::1%eth1"},
		{netAddr(netip.MustParseAddrPort("[fe80::1%eth1]:0")), "fe80::1%eth1"},
		{&net.TCPAddr{IP: net.ParseIP("10.0.0.1")}, "10.0.0.1"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1")}, "10.0.0.1"},
		{(*net.TCPAddr)(nil), "invalid IP"},
		{(*net.IPAddr)(nil), "invalid IP"},
		{(*Addr)(nil), "invalid IP"},
	} {
		ip, err := localIP(tc.a)
		if err != nil || ip.String() != tc.want {
			t.Errorf("localIP(%T %v) = %v, %v; want %s", tc.a, tc.a, ip, err, tc.want)
		}
	}
}
