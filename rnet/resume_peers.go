package rnet

import (
	"net/netip"
	"sync"
)

// What a dual listener's TCP side knows of the addresses its resumable
// connections came from: it looks for a resume request only on new
// connections from these (resume_tcp_linux.go).

// morePeeks is how many connections from an address the TCP side looks at
// at once beyond that address's connections in the table.
const morePeeks = 8

// peerCounts counts, by dialer address (IPv4 unmapped), a listener's
// resumable connections, those of them waiting for their dialer to resume,
// and the new connections being looked at.
type peerCounts struct {
	mu sync.Mutex
	// Guarded by mu; an address whose count falls to zero is deleted.
	conns, waiting, peeking map[netip.Addr]int
}

// add adds delta to ip's count in *m.
func add(m *map[netip.Addr]int, ip netip.Addr, delta int) {
	if *m == nil {
		*m = make(map[netip.Addr]int)
	}
	ip = ip.Unmap()
	if (*m)[ip] += delta; (*m)[ip] <= 0 {
		delete(*m, ip)
	}
}

// addPeer counts a connection from the dialer at ip.
func (r *resumeListener) addPeer(ip netip.Addr) { r.peers.adjust(&r.peers.conns, ip, 1) }

// dropPeer uncounts a connection addPeer counted.
func (r *resumeListener) dropPeer(ip netip.Addr) { r.peers.adjust(&r.peers.conns, ip, -1) }

// waitingFrom counts (delta 1) or uncounts (-1) a connection from the
// dialer at ip that waits for it to resume.
func (r *resumeListener) waitingFrom(ip netip.Addr, delta int) {
	r.peers.adjust(&r.peers.waiting, ip, delta)
}

// endPeek ends a look that beginPeek allowed.
func (r *resumeListener) endPeek(ip netip.Addr) { r.peers.adjust(&r.peers.peeking, ip, -1) }

func (p *peerCounts) adjust(m *map[netip.Addr]int, ip netip.Addr, delta int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	add(m, ip, delta)
}

// beginPeek reports whether the TCP side may look at one more connection
// from ip: one with a connection in the table, and fewer being looked at
// than its connections and morePeeks, so that one host cannot take every
// look for itself; endPeek undoes it. patient says the side should look at
// it with patience: a connection from ip waits for its dialer to resume.
func (r *resumeListener) beginPeek(ip netip.Addr) (ok, patient bool) {
	p := &r.peers
	p.mu.Lock()
	defer p.mu.Unlock()
	ip = ip.Unmap()
	n := p.conns[ip]
	if n == 0 || p.peeking[ip] >= n+morePeeks {
		return false, false
	}
	add(&p.peeking, ip, 1)
	return true, p.waiting[ip] > 0
}
