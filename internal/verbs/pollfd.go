//go:build linux

package verbs

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"

	"golang.org/x/sys/unix"
)

// PollFD parks goroutines in the runtime netpoller on a file descriptor that
// a C library reads and writes (an ibverbs completion channel, an rdma_cm
// event channel).
//
// The fd is made non-blocking so that reading it (inside the C library)
// returns EAGAIN instead of blocking a thread, and given to os.NewFile, whose
// RawConn the runtime polls. The one fd serves both: a duplicate would cost
// every connection a second descriptor. So the *os.File owns it and Close
// closes it; the library object must forget it first (its fd field set to
// -1), so that destroying the object closes nothing, and must not be used
// after.
type PollFD struct {
	f  *os.File
	rc syscall.RawConn
	// gate is held shared by every wait, and taken by Shutdown once it has
	// woken them: when Shutdown returns, no try function is running.
	gate lockcount.RWMutex

	closeOnce sync.Once
	closeErr  error

	mu       lockcount.Mutex // guards the file's read deadline and deadline; closed is set under it
	closed   atomic.Bool
	deadline time.Time // the caller's deadline, restored after a context wait
}

// NewPollFD sets fd non-blocking and prepares waiting on it; from then on
// the PollFD owns fd (see PollFD). name is used in errors.
func NewPollFD(fd int, name string) (*PollFD, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, &Error{Op: "fcntl O_NONBLOCK", Device: name, Errno: errnoOf(err)}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return nil, &Error{Op: "fcntl FD_CLOEXEC", Device: name, Errno: errnoOf(err)}
	}
	f := os.NewFile(uintptr(fd), name)
	rc, err := f.SyscallConn()
	if err != nil {
		// Not a file the runtime can poll; the library keeps its fd.
		return nil, &Error{Op: "SyscallConn", Device: name, Err: err}
	}
	return &PollFD{f: f, rc: rc}, nil
}

var aLongTimeAgo = time.Unix(1, 0)

// Wait calls try until it reports done, parking in the netpoller between
// calls. try must attempt one non-blocking read of the library's fd and return
// false only when that read would block (EAGAIN).
//
// Wait returns os.ErrDeadlineExceeded when the deadline set by SetDeadline
// passes, ctx.Err() when ctx ends, and net.ErrClosed after Close (also when
// Close happens during the wait). A context wait temporarily moves the
// deadline, so run at most one context wait at a time per PollFD.
func (p *PollFD) Wait(ctx context.Context, try func() bool) error {
	return p.WaitFunc(ctx, func(uintptr) bool { return try() })
}

// WaitFunc is Wait for a try function in the shape the runtime calls it
// with; a caller that keeps such a function around waits without
// allocating (with a context that cannot end).
func (p *PollFD) WaitFunc(ctx context.Context, try func(fd uintptr) bool) error {
	p.gate.RLock()
	defer p.gate.RUnlock()
	if p.closed.Load() {
		return net.ErrClosed
	}
	done := ctx.Done()
	if done == nil {
		return p.translate(p.rc.Read(try))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.f.SetReadDeadline(aLongTimeAgo)
		p.mu.Unlock()
		close(fired)
	})
	err := p.rc.Read(try)
	if !stop() {
		<-fired
		p.mu.Lock()
		if !p.closed.Load() {
			p.f.SetReadDeadline(p.deadline)
		}
		p.mu.Unlock()
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			return ctx.Err()
		}
	}
	return p.translate(err)
}

func (p *PollFD) translate(err error) error {
	if err == nil {
		return nil
	}
	if p.closed.Load() || errors.Is(err, os.ErrClosed) || err.Error() == "use of closed file" {
		// internal/poll reports a file closed under a waiter as
		// ErrFileClosing, which is neither os.ErrClosed nor net.ErrClosed.
		return net.ErrClosed
	}
	return err
}

// SetDeadline sets the deadline for current and future waits; the zero time
// means none. A deadline in the past wakes the waiters.
func (p *PollFD) SetDeadline(t time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return net.ErrClosed
	}
	p.deadline = t
	return p.translate(p.f.SetReadDeadline(t))
}

// Shutdown wakes all waiters, which get net.ErrClosed, as do later waits
// and deadlines. When it returns no try function is running. The fd stays
// open for the library, which may still use it (rdma_cm writes its commands
// there) until Close. It is idempotent.
func (p *PollFD) Shutdown() {
	p.mu.Lock()
	if p.closed.Swap(true) {
		p.mu.Unlock()
		return
	}
	// A past deadline wakes the parked waiters; under mu, so that no
	// SetDeadline or context wait can move it back.
	p.f.SetReadDeadline(aLongTimeAgo)
	p.mu.Unlock()
	// Taking the gate waits out the waits still running.
	p.gate.Lock()
	p.gate.Unlock()
}

// Close shuts the PollFD down and closes the fd. Call it once the library
// object has forgotten the fd and will not be used again, just before
// destroying it. It is idempotent.
func (p *PollFD) Close() error {
	p.closeOnce.Do(func() {
		p.Shutdown()
		p.closeErr = p.f.Close()
	})
	return p.closeErr
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}
