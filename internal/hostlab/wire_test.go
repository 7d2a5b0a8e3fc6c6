package hostlab

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
)

// fakeQemus stands in for the two qemus of a wire: UDP sockets on loopback
// that send to the relay and read what it forwards.
func fakeQemus(t *testing.T) (*Wire, [2]*net.UDPConn) {
	t.Helper()
	var socks [2]*net.UDPConn
	var ports [2]int
	for h := range 2 {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		socks[h], ports[h] = c, c.LocalAddr().(*net.UDPAddr).Port
	}
	w, err := newRelay(0, ports)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	return w, socks
}

func send(t *testing.T, w *Wire, socks [2]*net.UDPConn, from int, msg string) {
	t.Helper()
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: w.relayPort(from)}
	if _, err := socks[from].WriteToUDP([]byte(msg), to); err != nil {
		t.Fatal(err)
	}
}

func recv(t *testing.T, c *net.UDPConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2048)
	n, _, err := c.ReadFromUDP(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// TestRelay: frames cross both ways in order, a delay holds each one back
// at least that long, a cut and a loss of 1 drop every frame and count it,
// and Restore and a loss of 0 let frames through again.
func TestRelay(t *testing.T) {
	w, q := fakeQemus(t)
	for i := range 20 {
		send(t, w, q, 0, fmt.Sprint("a", i))
		send(t, w, q, 1, fmt.Sprint("b", i))
	}
	for i := range 20 {
		if got := recv(t, q[1]); got != fmt.Sprint("a", i) {
			t.Fatalf("B got %q, want a%d", got, i)
		}
		if got := recv(t, q[0]); got != fmt.Sprint("b", i) {
			t.Fatalf("A got %q, want b%d", got, i)
		}
	}

	const delay = 50 * time.Millisecond
	must(t, w.SetDelay(delay))
	start := time.Now()
	send(t, w, q, 0, "late")
	if got := recv(t, q[1]); got != "late" || time.Since(start) < delay {
		t.Fatalf("a delayed frame %q came after %v, want after %v", got, time.Since(start), delay)
	}
	must(t, w.SetDelay(0))

	dropped := func(n uint64) func() bool {
		return func() bool { _, d := w.Counts(); return d == n }
	}
	must(t, w.Cut())
	for range 5 {
		send(t, w, q, 0, "cut")
	}
	conntest.Until(t, "the relay has dropped the frames sent while cut", dropped(5))
	must(t, w.SetLoss(1))
	must(t, w.Restore())
	for range 5 {
		send(t, w, q, 1, "lost")
	}
	conntest.Until(t, "the relay has lost the frames sent at loss 1", dropped(10))
	must(t, w.SetLoss(0))
	send(t, w, q, 0, "through")
	if got := recv(t, q[1]); got != "through" {
		t.Fatalf("after the cut and the loss B got %q, want the frame sent after them", got)
	}
	if fwd, dropped := w.Counts(); fwd != 42 || dropped != 10 {
		t.Fatalf("Counts = %d forwarded, %d dropped; want 42 and 10", fwd, dropped)
	}
	if err := w.SetLoss(1.5); err == nil {
		t.Error("SetLoss(1.5) did not fail")
	}
	if err := (&Wire{direct: true}).Cut(); err == nil {
		t.Error("Cut on a direct wire did not fail")
	}
}

// ethFrame builds an Ethernet frame of etype with payload, tagged with a
// VLAN if vlan.
func ethFrame(etype uint16, vlan bool, payload []byte) []byte {
	f := make([]byte, 12, 18+len(payload))
	if vlan {
		f = append(f, 0x81, 0x00, 0x00, 0x05)
	}
	f = append(f, byte(etype>>8), byte(etype))
	return append(f, payload...)
}

// udpOver builds an IPv4 (with options, if ihl > 5) or IPv6 header for
// protocol proto, then a UDP header to port dst.
func udpOver(v6 bool, ihl int, proto byte, dst uint16) []byte {
	var ip []byte
	if v6 {
		ip = make([]byte, 40)
		ip[0], ip[6] = 0x60, proto
	} else {
		ip = make([]byte, ihl*4)
		ip[0], ip[9] = 0x40|byte(ihl), proto
	}
	return append(ip, 0x12, 0x34, byte(dst>>8), byte(dst), 0, 8, 0, 0)
}

// TestIsRoCEv2: RoCE v2 frames are told from the rest over IPv4 (with and
// without options), IPv6 and a VLAN tag; TCP, other UDP ports, ARP and
// truncated frames are not RoCE.
func TestIsRoCEv2(t *testing.T) {
	for _, c := range []struct {
		name  string
		frame []byte
		want  bool
	}{
		{"IPv4 UDP 4791", ethFrame(0x0800, false, udpOver(false, 5, 17, 4791)), true},
		{"IPv4 with options", ethFrame(0x0800, false, udpOver(false, 6, 17, 4791)), true},
		{"IPv6 UDP 4791", ethFrame(0x86dd, false, udpOver(true, 0, 17, 4791)), true},
		{"two VLAN tags", ethFrame(0x8100, true, append([]byte{}, ethFrame(0x0800, false, udpOver(false, 5, 17, 4791))[14:]...)), false},
		{"tagged IPv4 UDP 4791", append(ethFrame(0x8100, false, nil)[:14], append([]byte{0, 5, 0x08, 0x00}, udpOver(false, 5, 17, 4791)...)...), true},
		{"IPv4 TCP 4791", ethFrame(0x0800, false, udpOver(false, 5, 6, 4791)), false},
		{"IPv4 UDP 4792", ethFrame(0x0800, false, udpOver(false, 5, 17, 4792)), false},
		{"IPv6 TCP", ethFrame(0x86dd, false, udpOver(true, 0, 6, 4791)), false},
		{"ARP", ethFrame(0x0806, false, make([]byte, 28)), false},
		{"truncated", ethFrame(0x0800, false, udpOver(false, 5, 17, 4791))[:36], false},
		{"empty", nil, false},
	} {
		if got := isRoCEv2(c.frame); got != c.want {
			t.Errorf("%s: isRoCEv2 = %t, want %t", c.name, got, c.want)
		}
	}
}

// TestRelayCutRoCE: CutRoCE drops RoCE v2 frames both ways, forwards the
// rest, and Restore lets RoCE through again.
func TestRelayCutRoCE(t *testing.T) {
	w, q := fakeQemus(t)
	roce := string(ethFrame(0x0800, false, udpOver(false, 5, 17, 4791)))
	tcp := string(ethFrame(0x0800, false, udpOver(false, 5, 6, 4791)))
	must(t, w.CutRoCE())
	send(t, w, q, 0, roce)
	send(t, w, q, 1, roce)
	send(t, w, q, 0, tcp)
	send(t, w, q, 1, tcp)
	if got := recv(t, q[1]); got != tcp {
		t.Fatalf("B got %q, want the TCP frame alone", got)
	}
	if got := recv(t, q[0]); got != tcp {
		t.Fatalf("A got %q, want the TCP frame alone", got)
	}
	if fwd, dropped := w.Counts(); fwd != 2 || dropped != 2 {
		t.Fatalf("Counts = %d forwarded, %d dropped; want 2 and 2", fwd, dropped)
	}
	must(t, w.Restore())
	send(t, w, q, 0, roce)
	if got := recv(t, q[1]); got != roce {
		t.Fatalf("after Restore B got %q, want the RoCE frame", got)
	}
}
