package rnet

import (
	"net"
	"runtime"
	"testing"
)

// TestDroppedTCPConnStopsCounting: a *TCPConn dropped without Close leaves
// the open-connection gauge once the collector has found it, as its
// descriptor is closed then too; one closed twice counts down once.
func TestDroppedTCPConnStopsCounting(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	before := openCount(ReadMetrics(), "tcp", "")
	dialTCPConn := func() *TCPConn {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return newTCPConn(c.(*net.TCPConn), FallbackRefused, nil)
	}
	closed := dialTCPConn()
	func() { dialTCPConn() }() // dropped
	if got := openCount(ReadMetrics(), "tcp", "") - before; got != 2 {
		t.Fatalf("open TCP connections grew by %d with two made, want 2", got)
	}
	closed.Close()
	closed.Close()
	if got := openCount(ReadMetrics(), "tcp", "") - before; got != 1 {
		t.Fatalf("open TCP connections after one Close (twice) grew by %d, want 1", got)
	}
	for range 10 {
		runtime.GC()
		if openCount(ReadMetrics(), "tcp", "") == before {
			return
		}
	}
	t.Errorf("open TCP connections after 10 collections = %d, want %d: the dropped one still counts",
		openCount(ReadMetrics(), "tcp", ""), before)
}
