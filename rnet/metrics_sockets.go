package rnet

import (
	"cmp"
	"expvar"
	"slices"
	"sync"

	"github.com/rnet-dev/rnet/internal/stream"
)

// Sockets lists the process's open listeners and connections one by one,
// as ss lists a host's sockets: ReadSockets returns it, and the expvar
// variable "rnet_sockets" publishes it as JSON (rnet stat shows it), with
// all the listeners and the first 1000 connections in ReadSockets' order.
// Where Metrics sums, Sockets says which listener refused and which
// connection moved the bytes.
type Sockets struct {
	Listeners   []ListenerSocket `json:"listeners"`
	Connections []ConnSocket     `json:"connections"`
	// MoreConnections is how many open connections Connections leaves out.
	MoreConnections int `json:"more_connections"`
}

// ListenerSocket is an open Listener: its address and its metrics.
type ListenerSocket struct {
	Address string          `json:"address"`
	Metrics ListenerMetrics `json:"metrics"`
}

// ConnSocket is an open connection: an RDMA one (Conn) or a TCP one
// (TCPConn) that DialConn fell back to or a dual listener accepted.
type ConnSocket struct {
	// Transport is "rdma" or "tcp"; Device the RDMA device, "simulated"
	// for the test fabric, "" for TCP; QPNumber the connection's queue
	// pair number, as `rdma resource show qp` lists it (lqpn), 0 for the
	// test fabric and TCP.
	Transport string `json:"transport"`
	Device    string `json:"device"`
	Local     string `json:"local"`
	Remote    string `json:"remote"`
	QPNumber  uint32 `json:"qp_number"`
	// BytesRead and BytesWritten are the bytes Read returned and Write
	// accepted (Stats); SendRingSize and RecvRingSize the rings' sizes
	// now, the bulk of what the connection pins. All 0 for TCP.
	BytesRead    uint64 `json:"bytes_read"`
	BytesWritten uint64 `json:"bytes_written"`
	SendRingSize int    `json:"send_ring_size"`
	RecvRingSize int    `json:"recv_ring_size"`
}

// publishedConnLimit is how many connections the "rnet_sockets" variable
// lists: every scrape of /debug/vars reads it, and a process with tens of
// thousands of connections would pay a lock and a row for each.
const publishedConnLimit = 1000

// sockets are the open listeners and RDMA connections, for ReadSockets.
// No connection's lock is taken with mu held: a connection may report its
// close with its own lock held.
var sockets struct {
	mu        sync.Mutex
	listeners map[*listener]struct{}     // guarded by mu
	conns     map[*stream.Conn]*openConn // guarded by mu
}

// openConn is an open RDMA connection and its addresses as ReadSockets
// lists them, made when it opens, so that ReadSockets sorts the
// connections without touching those it leaves out.
type openConn struct {
	conn          *stream.Conn
	local, remote string
	// device is the device whose open-connection gauge counts the
	// connection; under sockets.mu, as a resume may move it.
	device string
}

// listenerOpened and listenerClosed keep l in ReadSockets' list.
func listenerOpened(l *listener) {
	sockets.mu.Lock()
	if sockets.listeners == nil {
		sockets.listeners = make(map[*listener]struct{})
	}
	sockets.listeners[l] = struct{}{}
	sockets.mu.Unlock()
}

func listenerClosed(l *listener) {
	sockets.mu.Lock()
	delete(sockets.listeners, l)
	sockets.mu.Unlock()
}

// connOpened lists c for ReadSockets, counted in device's open-connection
// gauge.
func connOpened(c *stream.Conn, device string) {
	oc := newOpenConn(c)
	oc.device = device
	sockets.mu.Lock()
	if sockets.conns == nil {
		sockets.conns = make(map[*stream.Conn]*openConn)
	}
	sockets.conns[c] = oc
	openGauge("rdma", device).Add(1)
	sockets.mu.Unlock()
}

// connClosed drops c from the list and from its device's gauge.
func connClosed(c *stream.Conn) {
	sockets.mu.Lock()
	if oc := sockets.conns[c]; oc != nil {
		openGauge("rdma", oc.device).Add(-1)
		delete(sockets.conns, c)
	}
	sockets.mu.Unlock()
}

// connMoved counts c, resumed, in device's gauge rather than the one it
// was opened or last resumed on; nothing once c has closed.
func connMoved(c *stream.Conn, device string) {
	sockets.mu.Lock()
	if oc := sockets.conns[c]; oc != nil && oc.device != device {
		openGauge("rdma", oc.device).Add(-1)
		openGauge("rdma", device).Add(1)
		oc.device = device
	}
	sockets.mu.Unlock()
}

func newOpenConn(c *stream.Conn) *openConn {
	return &openConn{conn: c, local: addrString(c.LocalAddr()), remote: addrString(c.RemoteAddr())}
}

// queuePairNumberer is a queue pair on a device.
type queuePairNumberer interface{ qpNumber() uint32 }

// socket is oc's row in Sockets; it takes the connection's lock, briefly.
func (oc *openConn) socket() ConnSocket {
	snap := oc.conn.Stats()
	cs := ConnSocket{
		Transport: "rdma", Device: connDevice(oc.conn), Local: oc.local, Remote: oc.remote,
		BytesRead: snap.Engine.BytesRead, BytesWritten: snap.Engine.BytesWritten,
		SendRingSize: snap.SendRingSize, RecvRingSize: snap.RecvRingSize,
	}
	oc.conn.WithQueuePair(func(q stream.QueuePair) {
		if n, ok := q.(queuePairNumberer); ok {
			cs.QPNumber = n.qpNumber()
		}
	}) // closed: no queue pair to number
	return cs
}

// ReadSockets returns the process's open listeners, sorted by address, and
// its open connections: the RDMA ones, then the TCP ones, each sorted by
// local and peer address. If n > 0, it lists at most n connections, the
// first in that order, and counts the others in MoreConnections; if n <= 0,
// it lists them all. It sorts every connection by address but takes the
// lock of only the RDMA connections it lists, one at a time and briefly, as
// Stats does: listing all of a busy process's thousands of connections is
// for diagnostics, not for every scrape (the "rnet_sockets" variable lists
// 1000).
func ReadSockets(n int) Sockets {
	sockets.mu.Lock()
	listeners := make([]*listener, 0, len(sockets.listeners))
	for l := range sockets.listeners {
		listeners = append(listeners, l)
	}
	rdma := make([]*openConn, 0, len(sockets.conns))
	for _, oc := range sockets.conns {
		rdma = append(rdma, oc)
	}
	sockets.mu.Unlock()
	return listSockets(listeners, rdma, openTCPConnList(), n)
}

// listSockets is ReadSockets of these listeners and connections.
func listSockets(listeners []*listener, rdma []*openConn, tcp []*TCPConn, n int) Sockets {
	total := len(rdma) + len(tcp)
	if n <= 0 || n > total {
		n = total
	}
	s := Sockets{
		Listeners:       make([]ListenerSocket, 0, len(listeners)),
		Connections:     make([]ConnSocket, 0, n),
		MoreConnections: total - n,
	}
	for _, l := range listeners {
		s.Listeners = append(s.Listeners, ListenerSocket{Address: l.addr.String(), Metrics: l.metrics()})
	}
	slices.SortFunc(s.Listeners, func(a, b ListenerSocket) int { return cmp.Compare(a.Address, b.Address) })

	listed := min(n, len(rdma))
	sortFirst(rdma, listed, func(a, b *openConn) int {
		return cmp.Or(cmp.Compare(a.local, b.local), cmp.Compare(a.remote, b.remote))
	})
	for _, oc := range rdma[:listed] {
		s.Connections = append(s.Connections, oc.socket())
	}
	if left := n - len(s.Connections); left > 0 {
		rows := make([]ConnSocket, 0, len(tcp))
		for _, tc := range tcp {
			rows = append(rows, ConnSocket{Transport: "tcp", Local: addrString(tc.LocalAddr()), Remote: addrString(tc.RemoteAddr())})
		}
		sortFirst(rows, left, func(a, b ConnSocket) int {
			return cmp.Or(cmp.Compare(a.Local, b.Local), cmp.Compare(a.Remote, b.Remote))
		})
		s.Connections = append(s.Connections, rows[:left]...)
	}
	return s
}

// sortFirst reorders s so that s[:k] holds its k least elements, sorted by
// compare, for a read that lists the first of many connections. For s in
// random order, as a map gives it, selecting them first takes time about
// linear in len(s), where sorting all of s would take len(s)·log(len(s)).
func sortFirst[E any](s []E, k int, compare func(a, b E) int) {
	// Everything in s[:lo] is at most everything in s[lo:hi], which is at
	// most everything in s[hi:], and lo <= k <= hi.
	lo, hi := 0, len(s)
	for lo < k && k < hi {
		pivot := s[lo+(hi-lo)/2]
		// Split s[lo:hi] into s[lo:lt] < pivot, s[lt:gt] == pivot and
		// s[gt:hi] > pivot; equal keys keep the split linear.
		lt, i, gt := lo, lo, hi
		for i < gt {
			switch c := compare(s[i], pivot); {
			case c < 0:
				s[lt], s[i] = s[i], s[lt]
				lt++
				i++
			case c > 0:
				gt--
				s[i], s[gt] = s[gt], s[i]
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt
		case k > gt:
			lo = gt
		default:
			lo, hi = k, k
		}
	}
	slices.SortFunc(s[:k], compare)
}

// socketsExpvarName is the expvar variable Sockets are published as.
const socketsExpvarName = "rnet_sockets"

// publishSockets publishes ReadSockets(n) as the expvar variable name
// unless that name is taken (see publishMetrics).
func publishSockets(name string, n int) bool {
	if expvar.Get(name) != nil {
		return false
	}
	expvar.Publish(name, expvar.Func(func() any { return ReadSockets(n) }))
	return true
}
