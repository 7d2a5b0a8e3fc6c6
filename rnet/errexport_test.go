package rnet

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// A NoAnswerError around the connection manager's own give-up stays one
// through exportError, its cause exported.
func TestNoAnswerErrorExported(t *testing.T) {
	inner := &verbs.Error{Op: "rdma_connect", Addr: "10.0.0.2:7471", Errno: syscall.ETIMEDOUT, Err: cm.ErrUnreachable}
	err := exportError(&net.OpError{Op: "dial", Net: "rdma", Err: &NoAnswerError{Addr: "10.0.0.2:7471", Step: stepConnect, Err: inner}})
	var na *NoAnswerError
	if !errors.As(err, &na) || na.Step != stepConnect {
		t.Fatalf("errors.As(%v, *NoAnswerError) = false, want the dial's NoAnswerError", err)
	}
	var de *DeviceError
	if !errors.As(err, &de) || de.Op != "rdma_connect" {
		t.Errorf("errors.As(%v, *DeviceError) = false, want the exported cause", err)
	}
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Errorf("errors.Is(%v, ETIMEDOUT) = false", err)
	}
}

// A Dialer's Logger names a reject as "rejected" from the error the caller
// sees, whose reject is rnet's exported RejectError.
func TestDialFailureReasonOfExportedReject(t *testing.T) {
	err := exportError(&net.OpError{Op: "dial", Net: "rdma", Err: &cm.RejectError{Addr: "10.0.0.2:7471", Status: 8}})
	if got := dialFailureReason(err); got != "rejected" {
		t.Errorf("dialFailureReason(%v) = %q, want rejected", err, got)
	}
}
