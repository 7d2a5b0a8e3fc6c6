package rnet

import (
	"encoding/json"
	"expvar"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
)

// findConn returns the connection from local to remote in s.
func findConn(s Sockets, local, remote string) (ConnSocket, bool) {
	i := slices.IndexFunc(s.Connections, func(c ConnSocket) bool { return c.Local == local && c.Remote == remote })
	if i < 0 {
		return ConnSocket{}, false
	}
	return s.Connections[i], true
}

// TestReadSocketsListsListenersAndConns: ReadSockets lists an open
// listener with its counts and each open connection, RDMA or TCP, with
// its addresses, device, bytes and rings, until it closes; the expvar
// variable "rnet_sockets" publishes the same.
func TestReadSocketsListsListenersAndConns(t *testing.T) {
	addr := netip.MustParseAddrPort("10.0.0.2:7481")
	ln, offer := simListen(addr, 1, func() {})
	// Addresses no other test uses, so that no other connection is taken
	// for these.
	a, b, err := simPair(nil, netip.MustParseAddrPort("10.0.0.1:40481"), addr)
	if err != nil {
		t.Fatal(err)
	}
	if !offer(b) {
		t.Fatal("the listener did not take the connection")
	}
	if _, err := ln.Accept(); err != nil {
		t.Fatal(err)
	}
	msg := []byte("twelve bytes")
	if _, err = a.Write(msg); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(b, make([]byte, len(msg))); err != nil {
		t.Fatal(err)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	raw, err := net.Dial("tcp", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := newTCPConn(raw.(*net.TCPConn), FallbackRefused, nil)
	defer tc.Close()

	s := ReadSockets()
	i := slices.IndexFunc(s.Listeners, func(l ListenerSocket) bool { return l.Address == addr.String() })
	if i < 0 {
		t.Fatalf("ReadSockets lists no listener on %v: %+v", addr, s.Listeners)
	}
	if got := s.Listeners[i].Metrics.Counters.Accepted; got != 1 {
		t.Errorf("listener on %v: %d accepted, want 1", addr, got)
	}
	sa, ok := findConn(s, a.LocalAddr().String(), a.RemoteAddr().String())
	if !ok {
		t.Fatalf("ReadSockets lists no connection %v -> %v: %+v", a.LocalAddr(), a.RemoteAddr(), s.Connections)
	}
	if sa.Transport != "rdma" || sa.Device != "simulated" || sa.BytesWritten != uint64(len(msg)) || sa.SendRingSize <= 0 || sa.RecvRingSize <= 0 {
		t.Errorf("connection %+v; want rdma on simulated, %d bytes written, rings", sa, len(msg))
	}
	if sb, ok := findConn(s, b.LocalAddr().String(), b.RemoteAddr().String()); !ok || sb.BytesRead != uint64(len(msg)) {
		t.Errorf("the accepted end %+v (listed %t); want %d bytes read", sb, ok, len(msg))
	}
	if st, ok := findConn(s, tc.LocalAddr().String(), tc.RemoteAddr().String()); !ok || st.Transport != "tcp" {
		t.Errorf("the TCP connection %+v (listed %t); want transport tcp", st, ok)
	}

	if publishSockets(socketsExpvarName) {
		t.Errorf("publishSockets published %q a second time", socketsExpvarName)
	}
	var published Sockets
	if err := json.Unmarshal([]byte(expvar.Get(socketsExpvarName).String()), &published); err != nil {
		t.Fatalf("the %s variable: %v", socketsExpvarName, err)
	}
	if _, ok := findConn(published, a.LocalAddr().String(), a.RemoteAddr().String()); !ok {
		t.Errorf("the %s variable lacks the connection: %+v", socketsExpvarName, published)
	}

	a.Close()
	b.Close()
	ln.Close()
	tc.Close()
	s = ReadSockets()
	if _, ok := findConn(s, a.LocalAddr().String(), a.RemoteAddr().String()); ok {
		t.Error("ReadSockets lists a closed connection")
	}
	if _, ok := findConn(s, tc.LocalAddr().String(), tc.RemoteAddr().String()); ok {
		t.Error("ReadSockets lists a closed TCP connection")
	}
	if slices.ContainsFunc(s.Listeners, func(l ListenerSocket) bool { return l.Address == addr.String() }) {
		t.Error("ReadSockets lists a closed listener")
	}
}
