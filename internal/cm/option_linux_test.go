//go:build cgo

package cm

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// TestSetAckTimeout: an id takes an ACK timeout exponent from 0 to 31;
// above that SetAckTimeout fails with EINVAL naming the range, and on a
// closed id with net.ErrClosed.
func TestSetAckTimeout(t *testing.T) {
	rdmatest.Require(t)
	ch, err := NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	id, err := ch.NewID()
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	for _, exp := range []uint8{0, 13, MaxAckTimeout} {
		if err := id.SetAckTimeout(exp); err != nil {
			t.Errorf("SetAckTimeout(%d): %v", exp, err)
		}
	}
	err = id.SetAckTimeout(MaxAckTimeout + 1)
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "0 to 31") {
		t.Errorf("SetAckTimeout(32): %v, want EINVAL naming the range 0 to 31", err)
	}
	id.Close()
	if err := id.SetAckTimeout(13); !errors.Is(err, net.ErrClosed) {
		t.Errorf("SetAckTimeout on a closed id: %v, want net.ErrClosed", err)
	}
}
