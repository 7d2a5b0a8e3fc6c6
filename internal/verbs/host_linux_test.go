//go:build cgo

package verbs

import (
	"errors"
	"os"
	"testing"

	"github.com/rnet-dev/rnet/internal/wr"
)

// hasDevices reports whether the kernel exposes any RDMA device.
func hasDevices() bool {
	ents, err := os.ReadDir("/sys/class/infiniband")
	return err == nil && len(ents) > 0
}

// On a machine without RDMA (this project's build host: libibverbs is
// installed, the kernel has no RDMA), listing must say so with ErrNoDevice.
func TestNoDeviceGivesErrNoDevice(t *testing.T) {
	if hasDevices() {
		t.Skip("this machine has RDMA devices")
	}
	devs, err := Devices()
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Devices() = %v, %v; want ErrNoDevice", devs, err)
	}
	t.Log(err)
	if _, err := Open("rxe0"); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Open: %v, want ErrNoDevice", err)
	}
}

func TestWrapNilContext(t *testing.T) {
	if _, err := WrapContext(nil); err == nil {
		t.Fatal("WrapContext(nil) succeeded")
	}
}

func TestStatusTableMatchesLibibverbs(t *testing.T) {
	for s := wr.WCSuccess; s <= wr.WCTMRndvIncomplete; s++ {
		if got, want := s.Description(), cWCStatusStr(s); got != want {
			t.Errorf("status %d: our description %q, ibv_wc_status_str %q", s, got, want)
		}
	}
}
