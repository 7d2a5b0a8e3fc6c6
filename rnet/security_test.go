//go:build linux && cgo

package rnet

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// TestRXERegisteredAccess checks, on both ends of a real connection, that
// the peer is granted REMOTE_WRITE on the receive ring and the target SGL
// only: never REMOTE_READ or REMOTE_ATOMIC anywhere, nothing remote at all
// on the send ring. Then it grows every ring with a bulk stream both ways
// and checks the regions registered for them the same way: each has keys
// of its own, and the first receive ring, retired, is deregistered.
func TestRXERegisteredAccess(t *testing.T) {
	c1, c2 := rxeMaker(rdmatest.Require(t), nil)(t)
	defer c1.Close()
	defer c2.Close()
	first := map[*Conn]*verbs.MR{}
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
		first[c] = registeredRegions(c)[1]
	}

	conntest.StreamChecked(t, c1, c2, 8<<20, 256<<10, 64<<10, 11)
	conntest.StreamChecked(t, c2, c1, 8<<20, 256<<10, 64<<10, 12)
	keys := map[uint32]*verbs.MR{} // every key of both ends, and its region
	for _, c := range []*Conn{c1, c2} {
		driveUntil(t, c, "the send ring's last move", func(s Stats) bool { return s.SendRingSize == ring.DefaultBufSize })
		s := c.Stats()
		if s.RecvRingSize != ring.DefaultBufSize {
			t.Fatalf("%v: receive ring %d after a bulk stream", c.LocalAddr(), s.RecvRingSize)
		}
		mrs := registeredRegions(c)
		var sends, recvs, targets int
		for _, mr := range mrs {
			var want verbs.Access
			switch mr.Len() {
			case s.SendRingSize + ring.CtrlSlots*ring.CtrlSlotSize:
				want, sends = verbs.AccessLocalWrite, sends+1
			case s.RecvRingSize:
				want, recvs = verbs.AccessLocalWrite|verbs.AccessRemoteWrite, recvs+1
			case ring.TargetSGLEntries * ring.RemoteSGESize:
				want, targets = verbs.AccessLocalWrite|verbs.AccessRemoteWrite, targets+1
			default:
				// A region waiting for the next move: never remotely
				// readable, checked below.
				want = mr.Access()
			}
			if mr.Access() != want || mr.Access()&(verbs.AccessRemoteRead|verbs.AccessRemoteAtomic) != 0 {
				t.Errorf("%v: region of %d bytes registered %v, want %v", c.LocalAddr(), mr.Len(), mr.Access(), want)
			}
			ks := []uint32{mr.LKey()}
			if mr.Access()&verbs.AccessRemoteWrite != 0 {
				ks = append(ks, mr.RKey()) // a local-only region has no remote key to speak of
			}
			for _, k := range ks {
				if owner, dup := keys[k]; dup && owner != mr {
					t.Errorf("%v: key %#x of a region of %d bytes is also the key of one of %d bytes", c.LocalAddr(), k, mr.Len(), owner.Len())
				}
				keys[k] = mr
			}
		}
		if sends != 1 || recvs != 1 || targets != 1 {
			t.Errorf("%v: %d send, %d receive, %d target regions registered, want one each", c.LocalAddr(), sends, recvs, targets)
		}
		for _, mr := range mrs {
			if mr == first[c] {
				t.Errorf("%v: the first receive ring is still registered after the ring moved", c.LocalAddr())
			}
		}
		if first[c].Bytes() != nil {
			t.Errorf("%v: the first receive ring's memory is still mapped", c.LocalAddr())
		}
	}
}
