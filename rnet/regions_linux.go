//go:build linux && cgo

package rnet

import (
	"errors"
	"fmt"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// regionAccess is the access a ring's region is registered with: the
// receive ring is the only one the peer may write (besides the target
// SGL), and nothing is ever remotely readable.
func regionAccess(kind ring.RegionKind) verbs.Access {
	if kind == ring.RegionRecv {
		return verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	}
	return verbs.AccessLocalWrite
}

// AddRegion registers a new ring region in the connection's own protection
// domain, with a registration of its own: its key reaches this region
// only, and only through this connection's queue pair.
func (q *verbsQP) AddRegion(kind ring.RegionKind, size int) (ring.Region, error) {
	mr, err := q.pd.RegisterMR(size, regionAccess(kind))
	if err != nil {
		return ring.Region{}, fmt.Errorf("rnet: %s: %v ring of %d bytes: %w", q.device, kind, size, err)
	}
	q.mrs = append(q.mrs, mr)
	return mrRegion(mr), nil
}

// RemoveRegion deregisters a region the engine retired: from then on a
// write with its key fails at the device.
func (q *verbsQP) RemoveRegion(r ring.Region) error {
	for i, mr := range q.mrs {
		if mr.Addr() == r.Addr && mr.LKey() == r.LKey {
			if err := mr.Close(); err != nil {
				return err // kept: destroy tries again
			}
			q.mrs = append(q.mrs[:i], q.mrs[i+1:]...)
			return nil
		}
	}
	return errors.New("rnet: " + q.device + ": retired region not registered")
}

func mrRegion(mr *verbs.MR) ring.Region {
	return ring.Region{Buf: mr.Bytes(), Addr: mr.Addr(), LKey: mr.LKey(), RKey: mr.RKey()}
}
