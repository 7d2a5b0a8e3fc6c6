package rnet

import (
	"cmp"
	"encoding/json"
	"expvar"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
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

	s := ReadSockets(0)
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

	if publishSockets(socketsExpvarName, publishedConnLimit) {
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
	s = ReadSockets(0)
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

// TestListSocketsListsTheFirstN: with more connections than n, the list
// holds the first n, RDMA before TCP, each by local then peer address, and
// counts exactly the others; n <= 0 lists them all.
func TestListSocketsListsTheFirstN(t *testing.T) {
	server := netip.MustParseAddrPort("10.0.7.2:7481")
	var rdma []*openConn
	for port := uint16(40005); port > 40000; port-- {
		x, y, err := simPair(nil, netip.AddrPortFrom(netip.MustParseAddr("10.0.7.1"), port), server)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		defer y.Close()
		rdma = append(rdma, newOpenConn(y.conn), newOpenConn(x.conn))
	}
	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcpLn.Close()
	raw, err := net.Dial("tcp", tcpLn.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err := tcpLn.Accept()
	if err != nil {
		t.Fatal(err)
	}
	tcp := []*TCPConn{
		newTCPConn(accepted.(*net.TCPConn), FallbackRefused, nil),
		newTCPConn(raw.(*net.TCPConn), FallbackRefused, nil),
	}
	defer tcp[0].Close()
	defer tcp[1].Close()

	// The order: the clients by port, then the server ends by peer port,
	// then the TCP ends by local address.
	var want []string
	for port := 40001; port <= 40005; port++ {
		want = append(want, fmt.Sprintf("rdma 10.0.7.1:%d 10.0.7.2:7481", port))
	}
	for port := 40001; port <= 40005; port++ {
		want = append(want, fmt.Sprintf("rdma 10.0.7.2:7481 10.0.7.1:%d", port))
	}
	var tcpRows []string
	for _, tc := range tcp {
		tcpRows = append(tcpRows, fmt.Sprintf("tcp %v %v", tc.LocalAddr(), tc.RemoteAddr()))
	}
	slices.Sort(tcpRows)
	want = append(want, tcpRows...)

	for _, tt := range []struct{ n, listed int }{{3, 3}, {10, 10}, {11, 11}, {12, 12}, {100, 12}, {0, 12}, {-1, 12}} {
		s := listSockets(nil, slices.Clone(rdma), slices.Clone(tcp), tt.n)
		var got []string
		for _, c := range s.Connections {
			got = append(got, fmt.Sprintf("%s %s %s", c.Transport, c.Local, c.Remote))
		}
		if !slices.Equal(got, want[:tt.listed]) || s.MoreConnections != len(want)-tt.listed {
			t.Errorf("n=%d: listed %q and %d more; want %q and %d more", tt.n, got, s.MoreConnections, want[:tt.listed], len(want)-tt.listed)
		}
	}
	if s := listSockets(nil, slices.Clone(rdma), nil, 1); s.Connections[0].Device != "simulated" || s.Connections[0].SendRingSize <= 0 {
		t.Errorf("the first connection listed is %+v; want its device and rings", s.Connections[0])
	}
}

// TestSocketsVariableBounded: a sockets variable published with a bound of
// 3, with more connections open, lists 3 of them and counts the others; its
// JSON has the listeners, the connections and how many more.
func TestSocketsVariableBounded(t *testing.T) {
	const name = "rnet_sockets_bound_3"
	server := netip.MustParseAddrPort("10.0.7.4:7481")
	for port := uint16(40001); port <= 40004; port++ {
		x, y, err := simPair(nil, netip.AddrPortFrom(netip.MustParseAddr("10.0.7.3"), port), server)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		defer y.Close()
	}
	publishSockets(name, 3)
	v := expvar.Get(name)
	if v == nil {
		t.Fatalf("no %s variable", name)
	}
	// Other tests' connections may be open, and may close, never open,
	// while this test reads: the total lies between the two counts.
	before := len(ReadSockets(0).Connections)
	published := v.String()
	after := len(ReadSockets(0).Connections)

	var keys map[string]json.RawMessage
	if err := json.Unmarshal([]byte(published), &keys); err != nil {
		t.Fatalf("the %s variable: %v", name, err)
	}
	if got := slices.Sorted(maps.Keys(keys)); !slices.Equal(got, []string{"connections", "listeners", "more_connections"}) {
		t.Errorf("the %s variable has the keys %q", name, got)
	}
	var s Sockets
	if err := json.Unmarshal([]byte(published), &s); err != nil {
		t.Fatalf("the %s variable: %v", name, err)
	}
	if total := len(s.Connections) + s.MoreConnections; len(s.Connections) != 3 || total > before || total < after {
		t.Errorf("the %s variable lists %d connections and %d more; want 3 and %d to %d in all", name, len(s.Connections), s.MoreConnections, after, before)
	}
}

// TestSortFirst: sortFirst puts the k least elements first, in order, for
// every k, with and without equal elements.
func TestSortFirst(t *testing.T) {
	for _, distinct := range []int{3, 1000} {
		for length := range 40 {
			s := make([]int, length)
			for i := range s {
				s[i] = rand.IntN(distinct)
			}
			sorted := slices.Sorted(slices.Values(s))
			for k := range length + 1 {
				got := slices.Clone(s)
				sortFirst(got, k, cmp.Compare[int])
				if !slices.Equal(got[:k], sorted[:k]) || !slices.Equal(slices.Sorted(slices.Values(got)), sorted) {
					t.Fatalf("sortFirst(%v, %d) = %v; want %v first, the others after", s, k, got, sorted[:k])
				}
			}
		}
	}
}
