// Package rdmatest lets a test state that it needs a real RDMA device, and tells it which addresses to use.
//
// The same tests run in the Soft-RoCE guest (scripts/softroce-vm sets the
// variables below) and on hosts with real RDMA hardware, where the user sets
// them by hand. On a host without the variables a device test skips; when
// RNET_REQUIRE_RDMA=1 it fails instead, so the device tier can never pass by
// skipping.
//
// Environment:
//
//	RNET_TEST_SERVER        IPv4 address to listen on (a RoCE/IB device's IP), e.g. 10.77.0.2
//	RNET_TEST_CLIENT        IPv4 address to dial from (another device's IP, or the same), e.g. 10.77.0.1
//	RNET_TEST_SERVER6       optional IPv6 address to listen on, e.g. fd77::2
//	RNET_TEST_CLIENT6       optional IPv6 address to dial from, e.g. fd77::1
//	RNET_TEST_IWARP_SERVER  optional iWARP (siw) address to listen on, e.g. 10.78.0.2
//	RNET_TEST_IWARP_CLIENT  optional iWARP (siw) address to dial from, e.g. 10.78.0.1
//	RNET_REQUIRE_RDMA=1     a missing device or variable fails the test instead of skipping it
//	RNET_DEVICE_TESTS=FILE  a test that skips for want of a device appends a line to FILE:
//	                        its package directory, a tab, and its top-level test's name
//
// make test-host sets RNET_DEVICE_TESTS, so that the device tier can run in the lab
// only the tests that asked for a device on the host: the others passed there already.
package rdmatest

import (
	"net/netip"
	"os"
	"strings"
	"testing"
)

// Pair is a server address to listen on and a client address to dial from.
// Both are bare IP addresses; tests pick their own ports.
type Pair struct {
	Server netip.Addr
	Client netip.Addr
}

// Required reports whether RNET_REQUIRE_RDMA=1 is set, i.e. whether missing
// devices are failures rather than skips.
func Required() bool { return os.Getenv("RNET_REQUIRE_RDMA") == "1" }

// Require returns the IPv4 RoCE/IB pair, or skips (fails under
// RNET_REQUIRE_RDMA=1) when none is configured.
func Require(tb testing.TB) Pair {
	tb.Helper()
	return need(tb, "RNET_TEST_SERVER", "RNET_TEST_CLIENT", true)
}

// Require6 returns the IPv6 pair. A missing IPv6 pair fails only when
// RNET_REQUIRE_RDMA=1 and the IPv4 pair is set, since the lab always sets both.
func Require6(tb testing.TB) Pair {
	tb.Helper()
	return need(tb, "RNET_TEST_SERVER6", "RNET_TEST_CLIENT6", os.Getenv("RNET_TEST_SERVER") != "")
}

// RequireIWARP returns the iWARP (siw) pair. The lab sets it only where siw
// was built, so its absence skips even under RNET_REQUIRE_RDMA=1 unless
// RNET_REQUIRE_IWARP=1 is also set.
func RequireIWARP(tb testing.TB) Pair {
	tb.Helper()
	return need(tb, "RNET_TEST_IWARP_SERVER", "RNET_TEST_IWARP_CLIENT", os.Getenv("RNET_REQUIRE_IWARP") == "1")
}

func need(tb testing.TB, serverVar, clientVar string, mandatory bool) Pair {
	tb.Helper()
	s, c := os.Getenv(serverVar), os.Getenv(clientVar)
	if s == "" || c == "" {
		msg := "no RDMA device configured: " + serverVar + " and " + clientVar + " are not set (run under scripts/softroce-vm, or see README \"Real hardware\")"
		if Required() && mandatory {
			tb.Fatal(msg + "; RNET_REQUIRE_RDMA=1 makes this a failure")
		}
		record(tb)
		tb.Skip(msg)
	}
	sa, err := netip.ParseAddr(s)
	if err != nil {
		tb.Fatalf("%s=%q: %v", serverVar, s, err)
	}
	ca, err := netip.ParseAddr(c)
	if err != nil {
		tb.Fatalf("%s=%q: %v", clientVar, c, err)
	}
	return Pair{Server: sa, Client: ca}
}

// record notes in RNET_DEVICE_TESTS's file that tb's top-level test needs a
// device. A test that cannot write there fails: the device tier would
// otherwise leave it out.
func record(tb testing.TB) {
	tb.Helper()
	file := os.Getenv("RNET_DEVICE_TESTS")
	if file == "" {
		return
	}
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatalf("rdmatest: recording a device test in %s: %v", file, err)
	}
	top, _, _ := strings.Cut(tb.Name(), "/")
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		// One write per line: O_APPEND keeps the lines of parallel test
		// processes whole.
		_, err = f.WriteString(dir + "\t" + top + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		tb.Fatalf("rdmatest: recording a device test in RNET_DEVICE_TESTS=%s: %v", file, err)
	}
}
