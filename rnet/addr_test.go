package rnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
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
	if s.ring.SendBufferSize != 128<<10 || s.ring.RecvBufferSize != 128<<10 || s.ring.SendQueueSize != 255 || s.ring.RecvQueueSize != 384 || s.ring.InlineThreshold != 48 {
		t.Errorf("nil Config = %+v, want rsocket's rings and credit window, and a send queue of 255 entries of 48 inline bytes", s.ring)
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

// fakeLookup makes host names resolve to addrs for the rest of the test.
func fakeLookup(t *testing.T, addrs ...string) {
	t.Helper()
	old := lookupNetIP
	t.Cleanup(func() { lookupNetIP = old })
	lookupNetIP = func(ctx context.Context, network, host string) ([]netip.Addr, error) {
		var ips []netip.Addr
		for _, a := range addrs {
			ip := netip.MustParseAddr(a)
			if network == "ip4" && !ip.Unmap().Is4() || network == "ip6" && ip.Is4() {
				continue
			}
			ips = append(ips, ip)
		}
		if len(ips) == 0 {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return ips, nil
	}
}

// TestResolveAddrsKeepsEveryAddress: a host name's addresses all come back,
// in the resolver's order and filtered by the network, so that Dial can try
// each; Listen takes the first IPv4 one, as net.Listen does.
func TestResolveAddrsKeepsEveryAddress(t *testing.T) {
	fakeLookup(t, "fd77::2", "::ffff:10.77.0.2", "10.78.0.2")
	for _, tc := range []struct {
		network string
		want    string
	}{
		{"rdma", "[[fd77::2]:7471 10.77.0.2:7471 10.78.0.2:7471]"},
		{"rdma4", "[10.77.0.2:7471 10.78.0.2:7471]"},
		{"rdma6", "[[fd77::2]:7471]"},
	} {
		got, err := resolveAddrs(context.Background(), tc.network, "peer.example:7471")
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Errorf("resolveAddrs(%s) = %v, %v; want %s", tc.network, got, err, tc.want)
		}
	}
	if got, err := resolveAddr(context.Background(), "rdma", "peer.example:7471"); err != nil || got.String() != "10.77.0.2:7471" {
		t.Errorf("resolveAddr = %v, %v; want the first IPv4 address", got, err)
	}
	fakeLookup(t, "fd77::2")
	var dnsErr *net.DNSError
	if got, err := resolveAddrs(context.Background(), "rdma4", "peer.example:7471"); !errors.As(err, &dnsErr) {
		t.Errorf("rdma4 for an IPv6-only name = %v, %v; want a DNS error", got, err)
	}
}

// TestDialSerialTriesEachAddress: a refused first address does not end the
// dial; the error, when every address fails, is the first one's.
func TestDialSerialTriesEachAddress(t *testing.T) {
	addrs := []netip.AddrPort{
		netip.MustParseAddrPort("10.77.0.1:7471"),
		netip.MustParseAddrPort("[fd77::2]:7471"),
		netip.MustParseAddrPort("10.77.0.2:7471"),
	}
	want := &Conn{}
	var tried []netip.AddrPort
	c, err := dialSerial(context.Background(), addrs, func(ctx context.Context, a netip.AddrPort) (*Conn, error) {
		tried = append(tried, a)
		if a == addrs[1] {
			return want, nil
		}
		return nil, syscall.ECONNREFUSED
	})
	if c != want || err != nil || len(tried) != 2 {
		t.Fatalf("dialSerial = %p, %v after trying %v; want the second address's Conn", c, err, tried)
	}

	tried = nil
	_, err = dialSerial(context.Background(), addrs, func(ctx context.Context, a netip.AddrPort) (*Conn, error) {
		tried = append(tried, a)
		if a == addrs[0] {
			return nil, syscall.ECONNREFUSED
		}
		return nil, syscall.EHOSTUNREACH
	})
	if !errors.Is(err, syscall.ECONNREFUSED) || len(tried) != 3 {
		t.Fatalf("all failing: %v after trying %v; want the first error after all three", err, tried)
	}

	ctx, cancel := context.WithCancel(context.Background())
	tried = nil
	_, err = dialSerial(ctx, addrs, func(ctx context.Context, a netip.AddrPort) (*Conn, error) {
		tried = append(tried, a)
		cancel()
		return nil, context.Canceled
	})
	if !errors.Is(err, context.Canceled) || len(tried) != 1 {
		t.Fatalf("cancelled: %v after trying %v; want to stop after the first", err, tried)
	}
}

// TestDialSerialSharesTheDeadline: with a deadline, every attempt but the last
// ends well before it, so that a black-holed first address leaves time for
// the others; the last attempt has all that is left.
func TestDialSerialSharesTheDeadline(t *testing.T) {
	deadline := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	addrs := []netip.AddrPort{netip.MustParseAddrPort("10.77.0.1:1"), netip.MustParseAddrPort("10.77.0.2:1")}
	var got []time.Time
	dialSerial(ctx, addrs, func(ctx context.Context, a netip.AddrPort) (*Conn, error) {
		d, _ := ctx.Deadline()
		got = append(got, d)
		return nil, syscall.ECONNREFUSED
	})
	if len(got) != 2 || !got[0].Before(deadline.Add(-29*time.Minute)) || !got[1].Equal(deadline) {
		t.Fatalf("attempt deadlines %v, whole dial's %v; want about half, then all", got, deadline)
	}
}

func TestPartialDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		left time.Duration
		n    int
		want time.Duration
	}{
		{10 * time.Second, 2, 5 * time.Second},
		{10 * time.Second, 10, 2 * time.Second}, // never less than 2 s...
		{time.Second, 3, time.Second},           // ...unless less is left
	} {
		if got := partialDeadline(now, now.Add(tc.left), tc.n).Sub(now); got != tc.want {
			t.Errorf("partialDeadline(%v left, %d addresses) = %v, want %v", tc.left, tc.n, got, tc.want)
		}
	}
}

// TestDialerLocalAddrFamily: with an IPv4 LocalAddr, a name with only IPv6
// addresses fails before any connect, with net.Dialer's error.
func TestDialerLocalAddrFamily(t *testing.T) {
	fakeLookup(t, "fd77::2")
	d := &Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("10.77.0.1")}}
	_, err := d.Dial("rdma", "peer.example:7471")
	var ae *net.AddrError
	if !errors.As(err, &ae) || !strings.Contains(ae.Err, "no suitable address") {
		t.Fatalf("Dial = %v, want a no-suitable-address error", err)
	}
}

// TestBindAddr: like net.Listen for "tcp", a wildcard on "rdma" listens on
// IPv6 and IPv4; "rdma4" and "rdma6" keep to their family.
func TestBindAddr(t *testing.T) {
	for _, tc := range []struct {
		network, laddr string
		want           string
		v6only, dual   bool
	}{
		{"rdma", "0.0.0.0:7471", "[::]:7471", false, true},
		{"rdma", "[::]:7471", "[::]:7471", false, true},
		{"rdma4", "0.0.0.0:7471", "0.0.0.0:7471", false, false},
		{"rdma6", "[::]:7471", "[::]:7471", true, false},
		{"rdma", "10.77.0.2:7471", "10.77.0.2:7471", false, false},
		{"rdma", "[fd77::2]:0", "[fd77::2]:0", false, false},
	} {
		bind, v6only, dual := bindAddr(tc.network, netip.MustParseAddrPort(tc.laddr))
		if bind.String() != tc.want || v6only != tc.v6only || dual != tc.dual {
			t.Errorf("bindAddr(%s, %s) = %v, %v, %v; want %s, %v, %v", tc.network, tc.laddr, bind, v6only, dual, tc.want, tc.v6only, tc.dual)
		}
	}
}

var (
	heV6 = netip.MustParseAddrPort("[fd77::2]:7471")
	heV4 = netip.MustParseAddrPort("10.77.0.2:7471")
)

func TestSplitFamilies(t *testing.T) {
	v6b := netip.MustParseAddrPort("[fd77::3]:7471")
	p, f := splitFamilies([]netip.AddrPort{heV6, heV4, v6b})
	if fmt.Sprint(p) != fmt.Sprint([]netip.AddrPort{heV6, v6b}) || fmt.Sprint(f) != fmt.Sprint([]netip.AddrPort{heV4}) {
		t.Fatalf("splitFamilies = %v, %v", p, f)
	}
}

// A primary that hangs (a black-holed address) does not hold the dial: the
// fallback starts after the delay and wins, and the primary's attempt is
// cancelled and has ended by the time the dial returns.
func TestDialParallelFallsBackFromAHangingPrimary(t *testing.T) {
	want := &Conn{}
	var primaryEnded bool
	c, err := dialParallel(context.Background(), []netip.AddrPort{heV6}, []netip.AddrPort{heV4}, time.Millisecond,
		func(ctx context.Context, a netip.AddrPort) (*Conn, error) {
			if a == heV4 {
				return want, nil
			}
			<-ctx.Done()
			primaryEnded = true // read after dialParallel returns: the race detector checks the ordering
			return nil, ctx.Err()
		}, func(*Conn) { t.Error("nothing to discard") })
	if c != want || err != nil {
		t.Fatalf("dialParallel = %p, %v; want the fallback's Conn", c, err)
	}
	if !primaryEnded {
		t.Fatal("dialParallel returned before the cancelled primary attempt ended")
	}
}

// The fallback starts as soon as the primaries fail, not a delay later.
func TestDialParallelPrimaryFailureStartsTheFallback(t *testing.T) {
	want := &Conn{}
	c, err := dialParallel(context.Background(), []netip.AddrPort{heV6}, []netip.AddrPort{heV4}, time.Hour,
		func(ctx context.Context, a netip.AddrPort) (*Conn, error) {
			if a == heV4 {
				return want, nil
			}
			return nil, syscall.ECONNREFUSED
		}, func(*Conn) { t.Error("nothing to discard") })
	if c != want || err != nil {
		t.Fatalf("dialParallel = %p, %v; want the fallback's Conn", c, err)
	}
}

// A primary that connects before the delay leaves the fallback undialled.
func TestDialParallelPrimaryWins(t *testing.T) {
	want := &Conn{}
	c, err := dialParallel(context.Background(), []netip.AddrPort{heV6}, []netip.AddrPort{heV4}, time.Hour,
		func(ctx context.Context, a netip.AddrPort) (*Conn, error) {
			if a == heV4 {
				t.Error("the fallback was dialled")
			}
			return want, nil
		}, func(*Conn) { t.Error("nothing to discard") })
	if c != want || err != nil {
		t.Fatalf("dialParallel = %p, %v; want the primary's Conn", c, err)
	}
}

// When both connect, one is returned and the other is discarded, once.
func TestDialParallelDiscardsTheLoser(t *testing.T) {
	primaryConn, fallbackConn := &Conn{}, &Conn{}
	fallbackConnected := make(chan struct{})
	discarded := make(chan *Conn, 2)
	c, err := dialParallel(context.Background(), []netip.AddrPort{heV6}, []netip.AddrPort{heV4}, time.Millisecond,
		func(ctx context.Context, a netip.AddrPort) (*Conn, error) {
			if a == heV4 {
				close(fallbackConnected)
				return fallbackConn, nil
			}
			<-fallbackConnected // connects too, before it can see the cancel
			return primaryConn, nil
		}, func(c *Conn) { discarded <- c })
	if err != nil || c != primaryConn && c != fallbackConn {
		t.Fatalf("dialParallel = %p, %v", c, err)
	}
	if d := <-discarded; d == c {
		t.Fatalf("returned and discarded the same Conn %p", c)
	}
	select {
	case d := <-discarded:
		t.Fatalf("discarded %p as well", d)
	default:
	}
}

// When both families fail, the error is the primaries', as net.Dialer's is.
func TestDialParallelReturnsThePrimaryError(t *testing.T) {
	fallbackFailed := make(chan struct{})
	_, err := dialParallel(context.Background(), []netip.AddrPort{heV6}, []netip.AddrPort{heV4}, time.Millisecond,
		func(ctx context.Context, a netip.AddrPort) (*Conn, error) {
			if a == heV4 {
				close(fallbackFailed)
				return nil, syscall.EHOSTUNREACH
			}
			<-fallbackFailed // fails last
			return nil, syscall.ECONNREFUSED
		}, func(*Conn) { t.Error("nothing to discard") })
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dialParallel = %v, want the primary's ECONNREFUSED", err)
	}
}
