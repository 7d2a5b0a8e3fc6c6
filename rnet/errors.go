package rnet

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Errors a connection can end with, besides io.EOF, net.ErrClosed and
// os.ErrDeadlineExceeded. Each reaches the caller inside a *net.OpError and
// can be tested with errors.Is.
var (
	// ErrProtocol: the peer broke the rsocket protocol (bad private data,
	// more data or messages than it was granted, a reserved opcode, ...).
	// The connection is over; other connections are not affected.
	ErrProtocol = ring.ErrProtocol
	// ErrPeerGone: the peer disconnected without the protocol's DISCONNECT
	// message, or stopped answering (a failed keepalive), or its side
	// failed a transfer: retries exhausted, or its adapter refused the
	// write, as happens when its process dies. The error's text names the
	// completion status when there was one.
	ErrPeerGone = ring.ErrPeerGone
	// ErrAborted: Close gave up waiting for the peer to take written data
	// (Config.Linger) and dropped the rest. Close returns it; the peer
	// then sees ErrPeerGone, never a clean io.EOF after a truncated stream.
	ErrAborted = ring.ErrAborted
	// ErrDeviceRemoved: the RDMA device under the connection went away.
	// It is the connection manager's own, so that a Dial or Accept cut
	// short by the removal matches it too.
	ErrDeviceRemoved = cm.ErrDeviceRemoved
	// ErrNoDevice: this machine has no RDMA device (or its kernel has no
	// RDMA support), so nothing can be dialled or listened on.
	ErrNoDevice = verbs.ErrNoDevice
	// ErrLockedMemory: this process could not register a connection's
	// rings because registered memory is pinned and the process's
	// locked-memory limit (RLIMIT_MEMLOCK, `ulimit -l`) is too low, as
	// container runtimes and login sessions often set it. The error is a
	// *LockedMemoryError inside a *DeviceError, which also matches
	// syscall.ENOMEM; its text names the limit, what a connection pins and
	// how to raise the limit.
	ErrLockedMemory = verbs.ErrLockedMemory
	// ErrNotSupported: rnet was built for a platform without the RDMA stack
	// it uses (it needs Linux, cgo, libibverbs and librdmacm). It matches
	// errors.ErrUnsupported.
	ErrNotSupported = verbs.ErrNotSupported
)

// Typed errors, inside the *net.OpError a call returns, for callers that
// want the details with errors.As.

// ProtocolError says how the peer broke the rsocket protocol. The
// connection is over; other connections are not affected. errors.Is
// matches ErrProtocol and Check.
type ProtocolError struct {
	// Check is the rule the peer broke, such as "DATA exceeds granted
	// receive buffer" or "more messages than credits granted".
	Check error
	// Msg is the offending rsocket message word, the 32-bit immediate
	// data of the transfer (operation in the top 3 bits, its argument
	// below), or 0 when the failure was not about one message.
	Msg uint32
	// Detail gives the specifics in words: the lengths, offsets or codes
	// the check compared.
	Detail string
}

func (e *ProtocolError) Error() string {
	return (&ring.ProtocolError{Check: e.Check, Msg: ring.Msg(e.Msg), Detail: e.Detail}).Error()
}

func (e *ProtocolError) Unwrap() []error { return []error{e.Check, ErrProtocol} }

// CompletionError is a transfer the device reported failed while the
// connection was up: a dead or unreachable peer (retries exhausted), a
// remote access error, a flushed request. errors.Is matches ErrPeerGone
// when Status blames the peer's side.
type CompletionError struct {
	// ID is the failed work request's ID, as the connection numbered it.
	ID uint64
	// Status is what the device reported, such as WCRetryExcErr.
	Status CompletionStatus
	// VendorErr is the adapter's own code for the failure (0 when it has
	// none); its meaning is the vendor's.
	VendorErr uint32
	// Recv is true when the failed request was a receive, false for a send
	// (an RDMA write of data or a control message).
	Recv bool
}

func (e *CompletionError) Error() string { return e.internal().Error() }

// Unwrap lets errors.Is match ErrPeerGone when the status blames the
// peer's side.
func (e *CompletionError) Unwrap() []error { return e.internal().Unwrap() }

func (e *CompletionError) internal() *ring.CompletionError {
	return &ring.CompletionError{ID: e.ID, Status: wr.WCStatus(e.Status), VendorErr: e.VendorErr, Recv: e.Recv}
}

// DeviceError is a failed call into libibverbs or librdmacm, e.g.
//
//	rdma_resolve_route 10.77.0.2:7471: connection timed out
//
// errors.Is matches Errno (so syscall.ETIMEDOUT works) and Err.
type DeviceError struct {
	// Op is the C function that failed, such as "ibv_reg_mr" or
	// "rdma_resolve_addr".
	Op string
	// Device is the RDMA device the call was about, such as "mlx5_0" or
	// "rxe0", when known.
	Device string
	// Addr is the address (host:port) the call was about, when known.
	Addr string
	// Errno is the errno the call set, or 0 when the failure is not one.
	Errno syscall.Errno
	// Err is a further cause, such as a *LockedMemoryError, ErrNoDevice,
	// net.ErrClosed or a context's error, or nil.
	Err error
}

func (e *DeviceError) Error() string {
	return (&verbs.Error{Op: e.Op, Device: e.Device, Addr: e.Addr, Errno: e.Errno, Err: e.Err}).Error()
}

func (e *DeviceError) Unwrap() []error {
	return (&verbs.Error{Errno: e.Errno, Err: e.Err}).Unwrap()
}

// Timeout reports whether the error is a timeout (ETIMEDOUT or a
// deadline), as net.Error has it.
func (e *DeviceError) Timeout() bool {
	return (&verbs.Error{Errno: e.Errno, Err: e.Err}).Timeout()
}

// Temporary is false: nothing here is worth a blind retry.
func (e *DeviceError) Temporary() bool { return false }

// LockedMemoryError is a registration refused by the locked-memory limit
// (RLIMIT_MEMLOCK): registered memory is pinned, and a process without
// CAP_IPC_LOCK may pin no more than the limit. It comes inside a
// *DeviceError. errors.Is matches ErrLockedMemory.
type LockedMemoryError struct {
	// Soft is RLIMIT_MEMLOCK's soft limit in bytes, the one enforced, and
	// Hard how far an unprivileged process may raise it; ^uint64(0) is
	// unlimited.
	Soft, Hard uint64
	// Pinned is what the process had pinned when the registration failed
	// (VmPin), in bytes, or -1 if unknown.
	Pinned int64
	// Region is the size in bytes of the registration that was refused.
	Region int
	// Needed is what one connection end pins in all, in bytes, or 0 when
	// unknown.
	Needed int
}

func (e *LockedMemoryError) Error() string {
	return (&verbs.LockedMemoryError{Soft: e.Soft, Hard: e.Hard, Pinned: e.Pinned, Region: e.Region, Needed: e.Needed}).Error()
}

// Is makes errors.Is(err, ErrLockedMemory) true.
func (e *LockedMemoryError) Is(target error) bool { return target == ErrLockedMemory }

// RejectError is a Dial the peer refused. errors.Is matches
// syscall.ECONNREFUSED.
type RejectError struct {
	// Addr is the address dialled (host:port).
	Addr string
	// Status is the reject's status: on InfiniBand and RoCE the IB CM
	// reject reason (8: nothing listens on that port; 28: the listening
	// application refused); on iWARP a negative errno.
	Status int
	// PrivateData is what the peer sent with the reject, if anything
	// (zero-padded on InfiniBand and RoCE). An rnet listener says there
	// why it refused, and the error's text gives the reason.
	PrivateData []byte
}

func (e *RejectError) Error() string { return e.internal().Error() }

// ByApplication reports whether the listening application refused, as
// opposed to nothing listening.
func (e *RejectError) ByApplication() bool { return e.internal().ByApplication() }

// NoListener reports whether nothing listened on the address.
func (e *RejectError) NoListener() bool { return e.internal().NoListener() }

// Is makes errors.Is(err, syscall.ECONNREFUSED) true.
func (e *RejectError) Is(target error) bool { return target == syscall.ECONNREFUSED }

func (e *RejectError) internal() *cm.RejectError {
	return &cm.RejectError{Addr: e.Addr, Status: e.Status, PrivateData: e.PrivateData}
}

// dialError keeps the context's error visible through errors.Is, as net.Dialer does.
func dialError(ctx context.Context, local, remote net.Addr, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			err = &timeoutError{ctxErr}
		} else {
			err = ctxErr
		}
	} else if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		err = &timeoutError{context.DeadlineExceeded}
	}
	return &net.OpError{Op: "dial", Net: "rdma", Source: local, Addr: remote, Err: err}
}

// timeoutError is a dial timeout: Timeout() is true and errors.Is matches
// context.DeadlineExceeded, like the error net.Dialer returns.
type timeoutError struct{ err error }

func (e *timeoutError) Error() string   { return "i/o timeout" }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }
func (e *timeoutError) Unwrap() error   { return e.err }
