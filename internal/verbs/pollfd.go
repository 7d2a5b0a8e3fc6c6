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

	"golang.org/x/sys/unix"
)

// PollFD parks goroutines in the runtime netpoller on a file descriptor that
// a C library owns (an ibverbs completion channel, an rdma_cm event channel).
//
// The library's fd is made non-blocking so that reading it (inside the C
// library) returns EAGAIN instead of blocking a thread. A close-on-exec
// duplicate is given to os.NewFile, because the library closes its own fd and
// an *os.File must own the descriptor it closes. Waiters then use the
// duplicate's RawConn: the runtime polls it, and the try function reads the
// original fd through the library.
type PollFD struct {
	f      *os.File
	rc     syscall.RawConn
	closed atomic.Bool

	mu       sync.Mutex
	deadline time.Time // the caller's deadline, restored after a context wait
}

// NewPollFD sets fd (owned by a C library, not closed here) non-blocking and
// prepares waiting on it. name is used in errors.
func NewPollFD(fd int, name string) (*PollFD, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, &Error{Op: "fcntl O_NONBLOCK", Device: name, Errno: errnoOf(err)}
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, &Error{Op: "fcntl F_DUPFD_CLOEXEC", Device: name, Errno: errnoOf(err)}
	}
	f := os.NewFile(uintptr(dup), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
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
		p.f.SetReadDeadline(aLongTimeAgo)
		close(fired)
	})
	err := p.rc.Read(try)
	if !stop() {
		<-fired
		p.mu.Lock()
		p.f.SetReadDeadline(p.deadline)
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
	if p.closed.Load() {
		return net.ErrClosed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deadline = t
	return p.translate(p.f.SetReadDeadline(t))
}

// Close wakes all waiters (they get net.ErrClosed) and closes the duplicate
// fd. When it returns no try function is running, so the caller may then
// free the library's fd. It is idempotent.
func (p *PollFD) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	// os.File.Close on a pollable file waits until in-flight RawConn
	// callbacks have returned.
	return p.f.Close()
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}
