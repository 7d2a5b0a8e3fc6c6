//go:build !linux || !cgo

package cm

import (
	"errors"
	"testing"
)

func TestStubReportsNotSupported(t *testing.T) {
	if _, err := NewEventChannel(); !errors.Is(err, ErrNotSupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("NewEventChannel: %v", err)
	}
}
