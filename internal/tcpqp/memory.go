package tcpqp

import (
	"crypto/rand"
	"encoding/binary"
	"errors"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Registered memory: regions, their keys, and the lookups of local SGEs and
// of the peer's writes.

// Bounds on what the peer may queue: a frame's payload, and the frames
// waiting to land, unless the receive regions are larger. No frame of the
// engine's is larger than the region it lands in, so a peer cannot make
// us hold more than our own rings for one frame.
const (
	maxFrameFloor   = 64 << 10
	maxInboundFloor = 4 << 20
)

// firstAddr is the virtual address of the first region: not 0, so that a
// zeroed address names no region.
const firstAddr = 1 << 32

type region struct {
	buf         []byte
	addr        uint64
	lkey, rkey  uint32
	remoteWrite bool // a receive region: the peer may write it
}

// memory is a queue pair's registered regions; the QP's mu guards it.
type memory struct {
	regions  []region
	nextAddr uint64
	nextKey  uint32
}

func (m *memory) init() { m.nextAddr = firstAddr }

func (m *memory) clear() { m.regions = nil }

// AddRegion registers size bytes of new memory for a ring: a fresh virtual
// address, a local key, and a random remote key; only a receive region may
// be written by the peer.
func (q *QP) AddRegion(kind ring.RegionKind, size int) (ring.Region, error) {
	if size < 0 || kind != ring.RegionSend && kind != ring.RegionRecv {
		return ring.Region{}, errors.New("tcpqp: bad region request: " + kind.String())
	}
	buf := make([]byte, size)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return ring.Region{}, errDestroyed
	}
	m := &q.mem
	rkey, err := m.freshRKey()
	if err != nil {
		return ring.Region{}, err
	}
	m.nextKey++
	r := region{buf: buf, addr: m.nextAddr, lkey: m.nextKey, rkey: rkey, remoteWrite: kind == ring.RegionRecv}
	// A page-aligned gap of at least a page keeps regions apart, so an
	// overrun lands in no region at all.
	m.nextAddr += (uint64(size) + 8191) &^ 4095
	m.regions = append(m.regions, r)
	return ring.Region{Buf: buf, Addr: r.addr, LKey: r.lkey, RKey: r.rkey}, nil
}

// freshRKey draws a remote key the lkeys do not predict, unique among the
// live regions and never 0.
func (m *memory) freshRKey() (uint32, error) {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		k := binary.BigEndian.Uint32(b[:])
		if k != 0 && !m.hasRKey(k) {
			return k, nil
		}
	}
}

func (m *memory) hasRKey(k uint32) bool {
	for i := range m.regions {
		if m.regions[i].rkey == k {
			return true
		}
	}
	return false
}

// RemoveRegion forgets a region AddRegion made: from then on the peer's
// writes into it are a remote access error.
func (q *QP) RemoveRegion(r ring.Region) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	m := &q.mem
	for i := range m.regions {
		if m.regions[i].addr == r.Addr && m.regions[i].lkey == r.LKey {
			m.regions = append(m.regions[:i], m.regions[i+1:]...)
			return nil
		}
	}
	return errNotRegistered
}

// local finds the bytes of a local SGE; the lkey is checked unless inline.
func (m *memory) local(s wr.SGE, inline bool) ([]byte, bool) {
	for i := range m.regions {
		if r := &m.regions[i]; inline || s.LKey == r.lkey {
			if b, ok := ring.Span(r.buf, r.addr, s.Addr, s.Length); ok {
				return b, true
			}
		}
	}
	return nil, false
}

// remote finds the bytes a write of the peer may touch.
func (m *memory) remote(addr uint64, n uint32, rkey uint32) ([]byte, bool) {
	for i := range m.regions {
		if r := &m.regions[i]; r.rkey == rkey && r.remoteWrite {
			if b, ok := ring.Span(r.buf, r.addr, addr, n); ok {
				return b, true
			}
		}
	}
	return nil, false
}

// bounds returns the largest payload a frame may carry and how many bytes
// of frames may wait to land.
func (m *memory) bounds() (maxFrame, maxInbound int) {
	maxFrame, maxInbound = maxFrameFloor, 0
	for i := range m.regions {
		if r := &m.regions[i]; r.remoteWrite {
			maxFrame = max(maxFrame, len(r.buf))
			maxInbound += len(r.buf)
		}
	}
	return maxFrame, max(maxInbound, maxInboundFloor)
}
