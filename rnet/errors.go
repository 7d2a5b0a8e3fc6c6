package rnet

import (
	"context"
	"errors"
	"net"
	"os"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
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
type (
	// ProtocolError says how the peer broke the rsocket protocol: Check is
	// the rule it failed, Msg the offending message word when there is one.
	// errors.Is matches ErrProtocol.
	ProtocolError = ring.ProtocolError
	// CompletionError is a transfer the device reported failed: Status is
	// the ibv_wc_status (Status.Name() gives "IBV_WC_RETRY_EXC_ERR" and the
	// like), VendorErr the adapter's own code. errors.Is matches
	// ErrPeerGone when the status blames the peer's side.
	CompletionError = ring.CompletionError
	// DeviceError is a failed call into libibverbs or librdmacm: Op is the
	// C function, Device and Addr what it was about, Errno its errno
	// (errors.Is matches the errno too, such as syscall.ENOMEM).
	DeviceError = verbs.Error
	// LockedMemoryError is a registration refused by the locked-memory
	// limit: Soft and Hard are RLIMIT_MEMLOCK, Pinned what the process had
	// pinned already (-1 if unknown), Needed what one connection end pins.
	// errors.Is matches ErrLockedMemory.
	LockedMemoryError = verbs.LockedMemoryError
	// RejectError is a Dial the peer refused: Status is the connection
	// manager's reject reason. errors.Is matches syscall.ECONNREFUSED.
	RejectError = cm.RejectError
)

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
