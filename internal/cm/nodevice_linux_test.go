//go:build cgo

package cm

import (
	"errors"
	"os"
	"testing"
)

// On a machine without RDMA (the build host), the event channel cannot be
// made, and the error says there is no device.
func TestNoDeviceGivesErrNoDevice(t *testing.T) {
	if ents, err := os.ReadDir("/sys/class/infiniband"); err == nil && len(ents) > 0 {
		t.Skip("this machine has RDMA devices")
	}
	ch, err := NewEventChannel()
	if err == nil {
		ch.Close()
		t.Fatal("rdma_create_event_channel succeeded without an RDMA device")
	}
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("NewEventChannel: %v, want ErrNoDevice", err)
	}
	t.Log(err)
}
