//go:build linux && cgo

package rnet

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// TestRXEPathMTUMismatch: with the client's NIC at MTU 1500 (rxe: IB MTU
// 1024) and the server's at 9000 (4096), connections dialled either way run
// at 1024 on both queue pairs and carry data both ways. The dialler's
// connection manager puts its own port's MTU in the request, so when the
// larger side dials, only the reply's port MTU (ring.ConnData.PortMTU) and
// the acceptor's own port can bring its queue pairs down to 1024. The lab's
// veth drops frames larger than the receiving end's MTU, as a switch would.
func TestRXEPathMTUMismatch(t *testing.T) {
	pair := rdmatest.Require(t)
	small, large := nicOf(t, pair.Client), nicOf(t, pair.Server)
	if small == large {
		t.Skipf("client and server share %s: no MTU mismatch to make", small)
	}
	setNICMTU(t, small, 1500)
	setNICMTU(t, large, 9000)
	for _, dir := range []struct {
		name string
		pair rdmatest.Pair
	}{
		{"small dials large", pair},
		{"large dials small", rdmatest.Pair{Server: pair.Client, Client: pair.Server}},
	} {
		t.Run(dir.name, func(t *testing.T) {
			c, s := connectConfigs(t, dir.pair, nil, nil)
			defer c.Close()
			defer s.Close()
			for _, end := range []struct {
				name string
				conn *Conn
			}{{"client", c}, {"server", s}} {
				info, err := end.conn.Info()
				if err != nil {
					t.Fatalf("%s: Info: %v", end.name, err)
				}
				path, err := end.conn.conn.QueuePair().(*verbsQP).qp.Path()
				if err != nil {
					t.Fatal(err)
				}
				if info.PathMTU != 1024 || path.PathMTU != 1024 {
					t.Errorf("%s: path MTU %d in Info, %d on the queue pair, want 1024", end.name, info.PathMTU, path.PathMTU)
				}
			}
			if t.Failed() {
				return // the data would wait for its deadline
			}
			// Larger than a packet of either MTU, each way.
			exchangeWithin(t, c, s, 64<<10, 30*time.Second)
			exchangeWithin(t, s, c, 64<<10, 30*time.Second)
		})
	}
}

// exchangeWithin writes n bytes on a and reads them on b, failing if that
// takes longer than d.
func exchangeWithin(t *testing.T, a, b *Conn, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	defer a.SetDeadline(time.Time{})
	defer b.SetDeadline(time.Time{})
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*7 + i>>8)
	}
	written := make(chan error, 1)
	go func() {
		_, err := a.Write(want)
		written <- err
	}()
	got := make([]byte, n)
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	if err := <-written; err != nil {
		t.Fatalf("write %d bytes: %v", n, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the bytes read are not the bytes written")
	}
}

// nicOf is the name of the network interface that has addr.
func nicOf(t *testing.T, addr netip.Addr) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr() == addr {
				return ifi.Name
			}
		}
	}
	t.Fatalf("no interface has %v", addr)
	return ""
}

// setNICMTU sets the interface's MTU, which rxe follows with its port's
// active MTU, until the test ends.
func setNICMTU(t *testing.T, name string, mtu int) {
	t.Helper()
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	set := func(mtu int) error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		req, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		req.SetUint32(uint32(mtu))
		return unix.IoctlIfreq(fd, unix.SIOCSIFMTU, req)
	}
	if err := set(mtu); err != nil {
		if errors.Is(err, syscall.EPERM) && !rdmatest.Required() {
			t.Skipf("setting %s's MTU needs CAP_NET_ADMIN: %v", name, err)
		}
		t.Fatalf("setting %s's MTU to %d: %v", name, mtu, err)
	}
	t.Cleanup(func() {
		if err := set(ifi.MTU); err != nil {
			t.Errorf("restoring %s's MTU to %d: %v", name, ifi.MTU, err)
		}
	})
}
