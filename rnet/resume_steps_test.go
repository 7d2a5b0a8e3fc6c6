package rnet

import (
	"errors"
	"strings"
	"testing"
)

// A failed resume handshake's error says which steps it got through, and
// still matches what it wraps: the reject reason and the metrics class
// are read from it.
func TestResumeStepsWrap(t *testing.T) {
	s := startResumeSteps()
	s.mark("path free")
	s.mark("Resume call")
	err := s.wrap(errHandshakesBusy)
	if !errors.Is(err, errHandshakesBusy) || rejectReasonOf(err) != rejectReasonOf(errHandshakesBusy) {
		t.Fatalf("wrapped %v: no longer matches %v", err, errHandshakesBusy)
	}
	msg := err.Error()
	for _, want := range []string{"request read; path free at ", "; Resume call at ", "; failed at "} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q: want %q in it", msg, want)
		}
	}
	if strings.Contains(msg, "replied") {
		t.Errorf("%q names a step it never reached", msg)
	}
}
