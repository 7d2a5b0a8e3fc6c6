//go:build linux && cgo

package rnet

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// TestRXERegisteredAccess checks, on both ends of a real connection, that
// the peer is granted REMOTE_WRITE on the receive ring and the target SGL
// only: never REMOTE_READ or REMOTE_ATOMIC anywhere, nothing remote at all
// on the send ring.
func TestRXERegisteredAccess(t *testing.T) {
	c1, c2 := rxeMaker(rdmatest.Require(t), nil)(t)
	defer c1.Close()
	defer c2.Close()
	for _, c := range []*Conn{c1, c2} {
		send, recv, target, ok := registeredAccess(c)
		if !ok {
			t.Fatal("not a verbs connection with three memory regions")
		}
		want := map[string][2]verbs.Access{
			"send ring":    {send, verbs.AccessLocalWrite},
			"receive ring": {recv, verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
			"target SGL":   {target, verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
		}
		for name, w := range want {
			if w[0] != w[1] {
				t.Errorf("%v %s registered %v, want exactly %v", c.LocalAddr(), name, w[0], w[1])
			}
			if w[0]&(verbs.AccessRemoteRead|verbs.AccessRemoteAtomic) != 0 {
				t.Errorf("%v %s grants the peer %v", c.LocalAddr(), name, w[0])
			}
		}
	}
}
