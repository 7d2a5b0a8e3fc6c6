package verbs

import (
	"errors"
	"net"
	"os"
	"runtime"
	"syscall"
)

// ErrNoDevice means the machine has no usable RDMA device: libibverbs finds
// no kernel support (ibv_get_device_list fails with ENOSYS), lists no device,
// or librdmacm cannot open its event channel (ENODEV).
var ErrNoDevice = errors.New("rdma: no RDMA device")

// errClosed is what use after Close wraps.
var errClosed = net.ErrClosed

// ErrSharedChannel is returned by QP.Step with StepTakeEvent for a CQ that
// shares its completion channel with another CQ, whose events it would take.
var ErrSharedChannel = errors.New("completion channel has more than one CQ")

// ErrNotSupported is returned by every constructor where rnet has no RDMA
// implementation (not Linux, or built without cgo). It wraps
// errors.ErrUnsupported.
var ErrNotSupported = notSupported()

func notSupported() error {
	why := "without cgo"
	if runtime.GOOS != "linux" {
		why = "on " + runtime.GOOS
	}
	return &unsupportedError{"rdma: not supported " + why}
}

type unsupportedError struct{ msg string }

func (e *unsupportedError) Error() string { return e.msg }
func (e *unsupportedError) Unwrap() error { return errors.ErrUnsupported }

// Error is a failed call into libibverbs or librdmacm. It names the call, the
// device or address it was about, and the errno, e.g.
//
//	rdma_resolve_route 10.77.0.2:7471: connection timed out
//
// errors.Is matches Errno (so syscall.ETIMEDOUT works) and Err (ErrNoDevice,
// net.ErrClosed, os.ErrDeadlineExceeded, context errors).
type Error struct {
	Op     string        // the C function, e.g. "ibv_reg_mr"
	Device string        // the device, when known
	Addr   string        // the address (host:port), when known
	Errno  syscall.Errno // 0 when the failure is not an errno
	Err    error         // a further cause, or nil
}

func (e *Error) Error() string {
	s := e.Op
	if e.Device != "" {
		s += " " + e.Device
	}
	if e.Addr != "" {
		s += " " + e.Addr
	}
	switch {
	case e.Err != nil && e.Errno != 0:
		return s + ": " + e.Err.Error() + " (" + e.Errno.Error() + ")"
	case e.Err != nil:
		return s + ": " + e.Err.Error()
	case e.Errno != 0:
		return s + ": " + e.Errno.Error()
	}
	return s + ": failed"
}

func (e *Error) Unwrap() []error {
	var errs []error
	if e.Errno != 0 {
		errs = append(errs, e.Errno)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Timeout reports whether the error is a timeout (ETIMEDOUT or a deadline),
// so that it satisfies net.Error's idea of one.
func (e *Error) Timeout() bool {
	return e.Errno == syscall.ETIMEDOUT || errors.Is(e.Err, os.ErrDeadlineExceeded)
}

// Temporary is false: nothing here is worth a blind retry.
func (e *Error) Temporary() bool { return false }
