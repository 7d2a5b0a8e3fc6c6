package stream

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/rnet-dev/rnet/internal/ring"
)

// OpError wraps err the way package net does, keeping the conventions that
// callers compare against directly: a bare io.EOF, net.ErrClosed, and
// os.ErrDeadlineExceeded placed directly in Err so that Timeout() is true.
// A ResumeError stays whole: what its attempts met (a socket's deadline
// among them) is not the call's deadline, nor a close.
func OpError(op string, src, dst net.Addr, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	var re *ResumeError
	switch {
	case errors.As(err, &re):
	case errors.Is(err, ring.ErrClosed):
		err = net.ErrClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = os.ErrDeadlineExceeded
	case errors.Is(err, ring.ErrPeerDisconnected):
		err = &os.SyscallError{Syscall: "write", Err: syscall.ECONNRESET}
	}
	return &net.OpError{Op: op, Net: "rdma", Source: src, Addr: dst, Err: err}
}

// ErrQueuePairGone is what a QueuePair's Step wraps when a post failed
// because the queue pair or its device is gone (a removed device), not
// because of the work requests: the connection's path failed, and a
// connection that resumes does.
var ErrQueuePairGone = errors.New("rnet: the queue pair is gone")
