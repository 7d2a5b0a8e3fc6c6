package rnet

import (
	"net"
	"runtime"
	"testing"
	"weak"
)

// TestDroppedTCPConnStopsCounting: a *TCPConn dropped without Close leaves
// the open-connection count once the collector has found it; one closed
// twice counts down once. It checks the two connections' own entries, not
// the process's count, which other tests' connections also move.
func TestDroppedTCPConnStopsCounting(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	dialTCPConn := func() *TCPConn {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return newTCPConn(c.(*net.TCPConn), FallbackRefused, nil)
	}
	closed := dialTCPConn()
	kept := weak.Make(closed)
	dropped := func() weak.Pointer[TCPConn] { return weak.Make(dialTCPConn()) }()
	if !counted(kept) || !counted(dropped) {
		t.Fatalf("new TCP connections counted: %t and %t, want both", counted(kept), counted(dropped))
	}
	closed.Close()
	closed.Close()
	if counted(kept) || !counted(dropped) {
		t.Fatalf("after one Close (twice) counted: %t and %t, want only the open one", counted(kept), counted(dropped))
	}
	for range 10 {
		runtime.GC()
		if openTCPConns(); !counted(dropped) {
			return
		}
	}
	t.Error("after 10 collections the dropped TCP connection still counts")
}

// counted reports whether p's connection is counted as open.
func counted(p weak.Pointer[TCPConn]) bool {
	tcpConns.mu.Lock()
	defer tcpConns.mu.Unlock()
	_, ok := tcpConns.open[p]
	return ok && p.Value() != nil
}
