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
// variable "rnet_sockets" publishes it as JSON (rnet stat shows it). Where
// Metrics sums, Sockets says which listener refused and which connection
// moved the bytes.
type Sockets struct {
	Listeners   []ListenerSocket `json:"listeners"`
	Connections []ConnSocket     `json:"connections"`
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

// sockets are the open listeners and RDMA connections, for ReadSockets.
// No connection's lock is taken with mu held: a connection may report its
// close with its own lock held.
var sockets struct {
	mu        sync.Mutex
	listeners map[*listener]struct{}    // guarded by mu
	conns     map[*stream.Conn]struct{} // guarded by mu
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

// connOpened and connClosed keep c in ReadSockets' list.
func connOpened(c *stream.Conn) {
	sockets.mu.Lock()
	if sockets.conns == nil {
		sockets.conns = make(map[*stream.Conn]struct{})
	}
	sockets.conns[c] = struct{}{}
	sockets.mu.Unlock()
}

func connClosed(c *stream.Conn) {
	sockets.mu.Lock()
	delete(sockets.conns, c)
	sockets.mu.Unlock()
}

// queuePairNumberer is a queue pair on a device.
type queuePairNumberer interface{ qpNumber() uint32 }

// ReadSockets returns the process's open listeners and connections now,
// sorted by address. It takes each connection's lock in turn, briefly, as
// Stats does: it is for diagnostics, not for every scrape of a busy
// process's thousands of connections.
func ReadSockets() Sockets {
	sockets.mu.Lock()
	listeners := make([]*listener, 0, len(sockets.listeners))
	for l := range sockets.listeners {
		listeners = append(listeners, l)
	}
	conns := make([]*stream.Conn, 0, len(sockets.conns))
	for c := range sockets.conns {
		conns = append(conns, c)
	}
	sockets.mu.Unlock()

	s := Sockets{Listeners: make([]ListenerSocket, 0, len(listeners)), Connections: make([]ConnSocket, 0, len(conns))}
	for _, l := range listeners {
		s.Listeners = append(s.Listeners, ListenerSocket{Address: l.addr.String(), Metrics: l.metrics()})
	}
	for _, c := range conns {
		snap := c.Stats()
		cs := ConnSocket{
			Transport: "rdma", Device: connDevice(c), Local: addrString(c.LocalAddr()), Remote: addrString(c.RemoteAddr()),
			BytesRead: snap.Engine.BytesRead, BytesWritten: snap.Engine.BytesWritten,
			SendRingSize: snap.SendRingSize, RecvRingSize: snap.RecvRingSize,
		}
		if q, ok := c.QueuePair().(queuePairNumberer); ok {
			cs.QPNumber = q.qpNumber()
		}
		s.Connections = append(s.Connections, cs)
	}
	for _, tc := range openTCPConnList() {
		s.Connections = append(s.Connections, ConnSocket{Transport: "tcp", Local: addrString(tc.LocalAddr()), Remote: addrString(tc.RemoteAddr())})
	}
	slices.SortFunc(s.Listeners, func(a, b ListenerSocket) int { return cmp.Compare(a.Address, b.Address) })
	slices.SortFunc(s.Connections, func(a, b ConnSocket) int {
		return cmp.Or(cmp.Compare(a.Transport, b.Transport), cmp.Compare(a.Local, b.Local), cmp.Compare(a.Remote, b.Remote))
	})
	return s
}

// socketsExpvarName is the expvar variable Sockets are published as.
const socketsExpvarName = "rnet_sockets"

// publishSockets publishes ReadSockets as the expvar variable name unless
// that name is taken (see publishMetrics).
func publishSockets(name string) bool {
	if expvar.Get(name) != nil {
		return false
	}
	expvar.Publish(name, expvar.Func(func() any { return ReadSockets() }))
	return true
}
