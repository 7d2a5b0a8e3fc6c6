package stream

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
)

// TestOpErrorKeepsAResumeError: a resume that failed because one of its
// attempts met a socket's deadline, or a close, is reported as the resume
// that failed, not as the call's deadline or net.ErrClosed.
func TestOpErrorKeepsAResumeError(t *testing.T) {
	for name, inner := range map[string]error{
		"a deadline": &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded},
		"a close":    ring.ErrClosed,
	} {
		re := &ResumeError{Cause: errors.New("the path failed"), Err: fmt.Errorf("over TCP: %w", inner)}
		err := OpError("write", nil, nil, re)
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Err != error(re) {
			t.Errorf("%s: OpError = %#v, want the ResumeError in Err", name, err)
		}
		if oe != nil && oe.Timeout() {
			t.Errorf("%s: Timeout() is true for a resume that failed", name)
		}
	}
	// A deadline of the call's own still reads as one.
	if err := OpError("read", nil, nil, fmt.Errorf("wrapped: %w", os.ErrDeadlineExceeded)); !errors.Is(err, os.ErrDeadlineExceeded) || !err.(*net.OpError).Timeout() {
		t.Errorf("a deadline: %v", err)
	}
}
