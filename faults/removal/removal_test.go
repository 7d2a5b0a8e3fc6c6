//go:build linux && cgo

package removal

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/rnet"
)

// bound caps every wait: the lab runs under emulation, and a hang must
// become a failure, not a stuck CI run.
const bound = 60 * time.Second

func pairOn(t *testing.T, server, client netip.Addr) (*rnet.Conn, *rnet.Conn) {
	t.Helper()
	ln, err := rnet.Listen("rdma", net.JoinHostPort(server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   *rnet.Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := ln.AcceptRDMA()
		acc <- res{c, err}
	}()
	d := &rnet.Dialer{LocalAddr: &rnet.Addr{AddrPort: netip.AddrPortFrom(client, 0)}, Timeout: bound}
	c, err := d.Dial("rdma", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	return c, r.c
}

// TestDeviceRemovedUnderTraffic deletes rxe0 while a connection from rxe0 to
// rxe1 streams. That connection must end with an error on both sides within a
// bounded time, and Close must still release it, while a connection that uses
// only rxe1 (IPv6 over rxe1's loopback in the lab) keeps working. Once the
// process has closed everything on rxe0, the kernel finishes the delete.
func TestDeviceRemovedUnderTraffic(t *testing.T) {
	v4 := rdmatest.Require(t)
	v6 := rdmatest.Require6(t)
	if os.Getenv("RNET_GUEST") != "1" {
		t.Skip("deletes an RDMA device: only inside the Soft-RoCE lab (scripts/softroce-vm)")
	}
	// Goroutines are counted; fds and the device's resources are not:
	// librdmacm drops its own context on the removed device, and the
	// device's resources go with it.
	gor0 := procstat.GoroutineIDs()
	doomedClient, doomedServer := pairOn(t, v4.Server, v4.Client)
	otherClient, otherServer := pairOn(t, v6.Server, v6.Client)
	defer otherClient.Close()
	defer otherServer.Close()

	// A listener bound to the doomed device's address must stop blocking in
	// Accept; one on every device must keep accepting on the others.
	doomedLn, err := rnet.Listen("rdma", net.JoinHostPort(v4.Client.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer doomedLn.Close()
	acceptErr := make(chan error, 1)
	go func() {
		c, err := doomedLn.Accept()
		if err == nil {
			c.Close()
			err = errors.New("accepted a connection nobody dialled")
		}
		acceptErr <- err
	}()
	wildLn, err := rnet.Listen("rdma", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer wildLn.Close()

	// Stream from the doomed client until it fails; drain on the server.
	writeErr := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := doomedClient.Write(buf); err != nil {
				writeErr <- err
				return
			}
		}
	}()
	readErr := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, doomedServer)
		if err == nil {
			err = io.EOF
		}
		readErr <- err
	}()
	// Some data must flow before the device goes, or this tests nothing.
	deadline := time.Now().Add(bound)
	for doomedServer.Stats().BytesRead < 1<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("no traffic before the removal: %+v", doomedServer.Stats())
		}
		select {
		case err := <-writeErr:
			t.Fatalf("write failed before the removal: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}

	// The kernel finishes deleting the device only once every user has let
	// go of it, so the command runs while the connections react.
	start := time.Now()
	del := exec.Command("rdma", "link", "delete", "rxe0")
	if err := del.Start(); err != nil {
		t.Fatalf("rdma link delete rxe0: %v", err)
	}
	deleted := make(chan error, 1)
	go func() { deleted <- del.Wait() }()
	select {
	case err := <-writeErr:
		t.Logf("writer on the removed device failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
		var oe *net.OpError
		if !errors.Is(err, rnet.ErrDeviceRemoved) || !errors.As(err, &oe) {
			t.Errorf("writer error = %v, want a *net.OpError matching rnet.ErrDeviceRemoved", err)
		}
	case <-time.After(bound):
		t.Fatal("the writer on the removed device did not fail")
	}
	select {
	case err := <-readErr:
		t.Logf("reader on the peer ended after %v: %v", time.Since(start).Round(time.Millisecond), err)
		if !errors.Is(err, rnet.ErrPeerGone) {
			t.Errorf("peer's reader error = %v, want rnet.ErrPeerGone", err)
		}
	case <-time.After(bound):
		t.Fatal("the peer of the removed device never noticed")
	}
	select {
	case err := <-acceptErr:
		t.Logf("Accept on the removed device's address ended after %v: %v", time.Since(start).Round(time.Millisecond), err)
		var oe *net.OpError
		if !errors.Is(err, rnet.ErrDeviceRemoved) || !errors.As(err, &oe) || oe.Op != "accept" {
			t.Errorf("Accept error = %v, want an accept *net.OpError matching rnet.ErrDeviceRemoved", err)
		}
	case <-time.After(bound):
		t.Fatal("Accept on the removed device's address still blocks")
	}
	if err := doomedLn.Close(); err != nil {
		t.Errorf("Close of the listener on the removed device: %v", err)
	}
	closed := make(chan error, 2)
	go func() { closed <- doomedClient.Close() }()
	go func() { closed <- doomedServer.Close() }()
	for range 2 {
		select {
		case err := <-closed:
			if err != nil {
				t.Errorf("Close after the device was removed: %v", err)
			}
		case <-time.After(bound):
			t.Fatal("Close hung after the device was removed")
		}
	}

	// With nothing of this process left on the device, the kernel finishes
	// the delete: librdmacm, which keeps a context of every device an id
	// used, has been made to read the device list again and close it.
	select {
	case err := <-deleted:
		t.Logf("rdma link delete rxe0 finished %v after it began (err %v)", time.Since(start).Round(time.Millisecond), err)
		if err != nil {
			t.Errorf("rdma link delete rxe0: %v", err)
		}
	case <-time.After(bound):
		t.Fatal("rdma link delete rxe0 still waits for this process, which has closed everything on the device")
	}

	// The wildcard listener still accepts over the remaining device.
	wildDone := make(chan error, 1)
	go func() {
		c, err := wildLn.AcceptRDMA()
		if err == nil {
			_, err = c.Write([]byte("ok"))
			c.Close()
		}
		wildDone <- err
	}()
	port := wildLn.Addr().(*rnet.Addr).Port()
	d := &rnet.Dialer{LocalAddr: &rnet.Addr{AddrPort: netip.AddrPortFrom(v6.Client, 0)}, Timeout: bound}
	wc, err := d.Dial("rdma", netip.AddrPortFrom(v6.Server, port).String())
	if err != nil {
		wildLn.Close()
		t.Fatalf("dial a wildcard listener after the removal: %v (accept: %v)", err, <-wildDone)
	}
	if err := <-wildDone; err != nil {
		t.Errorf("wildcard listener after the removal: %v", err)
	}
	wbuf := make([]byte, 2)
	if _, err := io.ReadFull(wc, wbuf); err != nil || string(wbuf) != "ok" {
		t.Errorf("wildcard listener's connection after the removal: %q, %v", wbuf, err)
	}
	wc.Close()

	// The connection that never touched rxe0 still moves bytes.
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	go func() {
		<-ctx.Done()
		otherClient.SetDeadline(time.Unix(1, 0))
		otherServer.SetDeadline(time.Unix(1, 0))
	}()
	if _, err := otherClient.Write([]byte("still here")); err != nil {
		t.Fatalf("other connection after the removal: %v", err)
	}
	buf := make([]byte, 10)
	if _, err := io.ReadFull(otherServer, buf); err != nil || string(buf) != "still here" {
		t.Fatalf("other connection after the removal: %q, %v", buf, err)
	}

	// Once everything is closed, no goroutine of the connections or
	// listeners on the removed device is left behind.
	cancel()
	otherClient.Close()
	otherServer.Close()
	wildLn.Close()
	if left := procstat.WaitNoNewGoroutines(gor0); len(left) > 0 {
		t.Errorf("%d goroutines left after closing everything:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}
