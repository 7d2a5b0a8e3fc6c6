//go:build !linux || !cgo

package verbs

import (
	"errors"
	"testing"
)

func TestStubsReportNotSupported(t *testing.T) {
	if _, err := Devices(); !errors.Is(err, ErrNotSupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Devices: %v, want ErrNotSupported", err)
	}
	if _, err := Open("rxe0"); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Open: %v", err)
	}
	if _, err := WrapContext(nil); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("WrapContext: %v", err)
	}
	t.Log(ErrNotSupported)
}
