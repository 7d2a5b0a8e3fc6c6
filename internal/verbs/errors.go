package verbs

import (
	"errors"
	"net"
	"os"
	"runtime"
	"syscall"

	"github.com/rnet-dev/rnet/internal/bytesize"
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

// ErrLockedMemory marks a registration the kernel refused because it would
// take the process past its locked-memory limit (RLIMIT_MEMLOCK): registered
// memory is pinned, and a process without CAP_IPC_LOCK may pin no more than
// that limit. The error carrying it is a *LockedMemoryError.
var ErrLockedMemory = errors.New("rdma: locked-memory limit (RLIMIT_MEMLOCK) reached")

// LockedMemoryError says which locked-memory limit stopped a registration,
// how much was pinned already and how much was wanted, and how to raise the
// limit. errors.Is matches ErrLockedMemory.
type LockedMemoryError struct {
	Soft, Hard uint64 // RLIMIT_MEMLOCK in bytes; Hard is how far an unprivileged process may raise Soft
	Pinned     int64  // bytes the process had pinned when it failed (VmPin), or -1 if unknown
	Region     int    // bytes the refused registration would have pinned
	// Needed is what the whole operation pins, e.g. every region of a
	// connection, filled in by a caller that knows; 0 when unknown.
	Needed int
}

func (e *LockedMemoryError) Error() string {
	s := "locked-memory limit reached: RLIMIT_MEMLOCK is " + FormatBytes(e.Soft) + " (hard limit " + FormatBytes(e.Hard) + ")"
	if e.Pinned >= 0 {
		s += ", " + FormatBytes(uint64(e.Pinned)) + " already pinned"
	}
	if e.Needed > 0 {
		s += ", and a connection pins " + FormatBytes(uint64(e.Needed))
	} else {
		s += ", and this region needs " + FormatBytes(uint64(e.Region))
	}
	return s + "; raise the limit: `ulimit -l unlimited` before starting the program, " +
		"`--ulimit memlock=-1` for a container, `LimitMEMLOCK=infinity` for a systemd unit"
}

// Is makes errors.Is(err, ErrLockedMemory) true.
func (e *LockedMemoryError) Is(target error) bool { return target == ErrLockedMemory }

// FormatBytes writes a limit as bytesize.Format does, and "unlimited" for
// RLIM_INFINITY.
func FormatBytes(n uint64) string {
	if n == ^uint64(0) {
		return "unlimited"
	}
	return bytesize.Format(n)
}
