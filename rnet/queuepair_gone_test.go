//go:build linux && cgo

package rnet

import (
	"errors"
	"syscall"
	"testing"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// A post refused with EIO or ENODEV (a removed device) is the path's
// failure; one refused for want of room (a local bug) or a failed poll is
// not. (EINVAL asks the device for the queue pair's state: device tests.)
func TestRefusedAsGone(t *testing.T) {
	q := &verbsQP{}
	for _, tc := range []struct {
		err  error
		gone bool
	}{
		{&verbs.Error{Op: "ibv_post_send", Errno: syscall.EIO}, true},
		{&verbs.Error{Op: "ibv_post_recv", Errno: syscall.ENODEV}, true},
		{&verbs.Error{Op: "ibv_post_srq_recv", Errno: syscall.EIO}, true},
		{&verbs.Error{Op: "ibv_post_send", Errno: syscall.ENOMEM}, false},
		{&verbs.Error{Op: "ibv_poll_cq", Errno: syscall.EIO}, false},
		{errors.New("not a verbs error"), false},
	} {
		if got := q.refusedAsGone(tc.err); got != tc.gone {
			t.Errorf("refusedAsGone(%v) = %v, want %v", tc.err, got, tc.gone)
		}
	}
}
