//go:build linux && cgo

package rnet

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// deviceOf returns the RDMA device whose address ip is.
func deviceOf(t *testing.T, ip netip.Addr) string {
	t.Helper()
	ln, err := Listen("rdma", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := (&Dialer{Timeout: 30 * time.Second}).Dial("rdma", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.AcceptRDMA()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	info, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	return info.Device
}

// Dialer.Device and ListenConfig.Device pick devices by name: the listener
// binds the server device's address, the dial goes from the client
// device's, and the connection runs on those devices.
func TestRXEDeviceByName(t *testing.T) {
	pair := rdmatest.Require(t)
	serverDev, clientDev := deviceOf(t, pair.Server), deviceOf(t, pair.Client)
	if serverDev == clientDev {
		t.Skipf("server and client addresses are both on %s", serverDev)
	}
	ln, err := (&ListenConfig{Device: serverDev}).Listen(t.Context(), "rdma", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := ln.Addr().(*Addr).Addr(); got != pair.Server {
		t.Errorf("ListenConfig{Device: %q} on :0 listens on %v, want its address %v", serverDev, got, pair.Server)
	}
	c, err := (&Dialer{Device: clientDev, Timeout: 30 * time.Second}).Dial("rdma", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.AcceptRDMA()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ci, err := c.Info()
	if err != nil {
		t.Fatal(err)
	}
	si, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	if ci.Device != clientDev || si.Device != serverDev {
		t.Errorf("connection on %s -> %s, want %s -> %s", ci.Device, si.Device, clientDev, serverDev)
	}
	if got := c.LocalAddr().(*Addr).Addr(); got != pair.Client {
		t.Errorf("Dialer{Device: %q} dialled from %v, want %v", clientDev, got, pair.Client)
	}
	roundTripOnce(t, c, s)

	// A device that is not there: the error names it and those that are.
	_, err = (&Dialer{Device: "nosuch9"}).Dial("rdma", ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), `"nosuch9"`) || !strings.Contains(err.Error(), clientDev) {
		t.Errorf("Dial with an absent device = %v; want an error naming it and the devices present", err)
	}
	_, err = (&ListenConfig{Device: "nosuch9"}).Listen(t.Context(), "rdma", ":0")
	if err == nil || !strings.Contains(err.Error(), `"nosuch9"`) || !strings.Contains(err.Error(), serverDev) {
		t.Errorf("Listen with an absent device = %v; want an error naming it and the devices present", err)
	}
	// An address that is not the device's.
	_, err = (&ListenConfig{Device: clientDev}).Listen(t.Context(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err == nil || !strings.Contains(err.Error(), "is not an address of RDMA device") {
		t.Errorf("Listen on %v with Device %q = %v; want an error", pair.Server, clientDev, err)
	}
}
