//go:build cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

// Helpers at the crossing into shim.h, used by every file that calls C:
// how a verbs object is passed, and how a return value becomes an errno or
// an error.

// handle passes a verbs object (C memory) to the shim's hot-path functions
// as an integer, which cgo does not check for Go pointers (see shim.h).
func handle(p unsafe.Pointer) C.uintptr_t { return C.uintptr_t(uintptr(p)) }

// errnoOr returns the errno cgo captured, or def when there was none.
func errnoOr(err error, def syscall.Errno) syscall.Errno {
	if e, ok := err.(syscall.Errno); ok && e != 0 {
		return e
	}
	return def
}

// retErrno turns an ibverbs return value (0, a positive errno, or -1 with
// errno set, depending on the call and provider) into an errno.
func retErrno(r C.int, err error) syscall.Errno {
	switch {
	case r > 0:
		return syscall.Errno(r)
	case r < -1:
		return syscall.Errno(-r)
	}
	return errnoOr(err, syscall.EIO)
}

// errnoFromPost splits rnet_post_*'s return value.
func errnoFromPost(r C.int) (syscall.Errno, int) {
	return syscall.Errno(r >> 8), int(r & 0xff)
}

// pollError reports a failed ibv_poll_cq. Its negative return is no errno
// (mlx5 returns -2, others -1), so it is quoted, not mapped to one.
func pollError(dev string, ret int) error {
	return &Error{Op: "ibv_poll_cq", Device: dev, Err: fmt.Errorf("the provider failed (returned %d)", -ret)}
}
