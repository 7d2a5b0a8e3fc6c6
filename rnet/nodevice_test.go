//go:build linux && cgo

package rnet

import (
	"errors"
	"net"
	"os"
	"testing"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// On a host without RDMA, users must get an error that says so, not a hang
// or a cryptic errno.
func TestNoDeviceErrors(t *testing.T) {
	if _, err := verbs.Devices(); !errors.Is(err, verbs.ErrNoDevice) {
		t.Skipf("this host has RDMA devices (or another problem: %v)", err)
	}
	if os.Getenv("RNET_TEST_SERVER") != "" {
		t.Fatal("RNET_TEST_SERVER is set but there is no RDMA device")
	}
	_, err := Dial("rdma", "10.77.0.2:7471")
	var oe *net.OpError
	if !errors.Is(err, ErrNoDevice) || !errors.As(err, &oe) || oe.Op != "dial" {
		t.Errorf("Dial without a device = %v, want a dial OpError matching ErrNoDevice", err)
	}
	var de *DeviceError
	if !errors.As(err, &de) || de.Op == "" || !errors.Is(de.Err, ErrNoDevice) {
		t.Errorf("Dial without a device = %v, want a *DeviceError naming the call, its Err ErrNoDevice", err)
	}
	_, err = Listen("rdma", ":7471")
	if !errors.Is(err, ErrNoDevice) || !errors.As(err, &oe) || oe.Op != "listen" {
		t.Errorf("Listen without a device = %v, want a listen OpError matching ErrNoDevice", err)
	}
}
