package simfabric

import (
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// An endpoint's registered memory: registration, the lookups of local
// SGEs and of incoming RDMA WRITEs, and the landing of delivered payloads.

// Register makes buf known to the endpoint's device, as ibv_reg_mr does,
// and returns it as a ring.Region with a fresh address and keys. Only a
// region registered with remoteWrite may be the target of the peer's
// RDMA WRITEs; nothing is ever remotely readable.
func (e *Endpoint) Register(buf []byte, remoteWrite bool) ring.Region {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	addr := e.nextAddr
	// Keep regions apart so an overrun lands in no region at all.
	e.nextAddr += (uint64(len(buf)) + 8191) &^ 4095
	f.nextKey++
	r := region{
		buf:         buf,
		addr:        addr,
		lkey:        f.nextKey,
		rkey:        f.nextKey | 0x5a000000,
		remoteWrite: remoteWrite,
	}
	e.regions = append(e.regions, r)
	return ring.Region{Buf: buf, Addr: r.addr, LKey: r.lkey, RKey: r.rkey}
}

// Deregister forgets a region Register returned, as ibv_dereg_mr does:
// from then on the peer's RDMA WRITEs into it fail with a remote access
// error, and local work requests that name it fail too. It reports whether
// the region was registered.
func (e *Endpoint) Deregister(r ring.Region) bool {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range e.regions {
		if e.regions[i].addr == r.Addr && e.regions[i].lkey == r.LKey {
			e.regions = append(e.regions[:i], e.regions[i+1:]...)
			return true
		}
	}
	return false
}

// HasRegion reports whether a region registered at addr is still there.
func (e *Endpoint) HasRegion(addr uint64) bool {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	for i := range e.regions {
		if e.regions[i].addr == addr {
			return true
		}
	}
	return false
}

// Regions returns how many regions are registered.
func (e *Endpoint) Regions() int {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	return len(e.regions)
}

// local finds the bytes of a local SGE; lkey is checked unless inline.
func (e *Endpoint) local(s wr.SGE, inline bool) ([]byte, bool) {
	for i := range e.regions {
		if r := &e.regions[i]; inline || s.LKey == r.lkey {
			if b, ok := ring.Span(r.buf, r.addr, s.Addr, s.Length); ok {
				return b, true
			}
		}
	}
	return nil, false
}

// remote finds the bytes an incoming RDMA WRITE may touch.
func (e *Endpoint) remote(addr uint64, n uint32, rkey uint32) ([]byte, bool) {
	for i := range e.regions {
		if r := &e.regions[i]; r.rkey == rkey && r.remoteWrite {
			if b, ok := ring.Span(r.buf, r.addr, addr, n); ok {
				return b, true
			}
		}
	}
	return nil, false
}

// land copies delivered payloads into memory, in delivery order.
func (e *Endpoint) land() {
	for e.landing.len() > 0 {
		l := e.landing.pop()
		if l.dst != nil {
			e.inbound.read(l.dst, l.start)
		}
		e.inbound.release(l.end)
	}
}
