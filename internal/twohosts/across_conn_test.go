package twohosts

import (
	"context"
	byteorder "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/hostlab"
	"github.com/rnet-dev/rnet/rnet"
	"golang.org/x/net/nettest"
)

// nettest.TestConn needs both ends of a pipe in one process, so a pipe
// crosses the wire twice: host A dials the splice on host B (c1), tells it
// the port of A's own listener and the pipe's number, and the splice dials
// back to that listener (c2, accepted on A) and copies each way between its
// two connections, passing an end of stream on with CloseWrite. Everything
// A writes on c1 reaches c2 by way of B's kernel and device, and the
// reverse; both of A's ends are rnet connections whose peer is on B.

// spliceHeaderLen is what A sends first on c1: A's listener's port (2 bytes)
// and the pipe's number (8), which the splice sends first on c2.
const spliceHeaderLen = 10

func init() { roles["across-splice"] = spliceRole }

// TestConnContractBetweenHosts runs nettest.TestConn on pipes whose ends are
// on host A and whose peers are on host B, over IPv4 and over IPv6.
func TestConnContractBetweenHosts(t *testing.T) {
	needLab(t)
	l := labFor(t, hostlab.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	splice, addrs := startServerRole(t, ctx, l.B, "across-splice")
	runAcrossGuest(t, ctx, l.A, "TestAcrossGuestConn", targetsEnv(addrs))
	stopServerRole(t, ctx, splice, "across-splice")
}

// TestAcrossGuestConn is TestConnContractBetweenHosts's side on host A.
func TestAcrossGuestConn(t *testing.T) {
	inGuest(t)
	for _, splice := range acrossTargets(t) {
		t.Run(family(splice), func(t *testing.T) {
			local := hostAddr(t, splice)
			ln, err := rnet.Listen("rdma", netip.AddrPortFrom(local, 0).String())
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			var pipes atomic.Uint64
			nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
				return crossPipe(ln, local, splice, pipes.Add(1))
			})
		})
	}
}

// crossPipe makes pipe number id through the splice at splice.
func crossPipe(ln *rnet.Listener, local netip.Addr, splice netip.AddrPort, id uint64) (net.Conn, net.Conn, func(), error) {
	c1, err := dialerFrom(local).Dial("rdma", splice.String())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pipe %d: dialling the splice: %w", id, err)
	}
	var hdr [spliceHeaderLen]byte
	byteorder.BigEndian.PutUint16(hdr[:2], ln.Addr().(*rnet.Addr).Port())
	byteorder.BigEndian.PutUint64(hdr[2:], id)
	if _, err := c1.Write(hdr[:]); err != nil {
		c1.Close()
		return nil, nil, nil, fmt.Errorf("pipe %d: %w", id, err)
	}
	ln.SetDeadline(time.Now().Add(30 * time.Second))
	c2, err := ln.AcceptRDMA()
	if err != nil {
		c1.Close()
		return nil, nil, nil, fmt.Errorf("pipe %d: accepting the splice's connection: %w", id, err)
	}
	stop := func() { c1.Close(); c2.Close() }
	c2.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.ReadFull(c2, hdr[2:])
	c2.SetReadDeadline(time.Time{})
	if err != nil {
		stop()
		return nil, nil, nil, fmt.Errorf("pipe %d: reading its number from the splice: %w", id, err)
	}
	if got := byteorder.BigEndian.Uint64(hdr[2:]); got != id {
		stop()
		return nil, nil, nil, fmt.Errorf("accepted pipe %d's far end, want pipe %d's", got, id)
	}
	for _, c := range []*rnet.Conn{c1, c2} {
		if l, r := c.LocalAddr().(*rnet.Addr).Addr(), c.RemoteAddr().(*rnet.Addr).Addr(); l != local || r != splice.Addr() {
			stop()
			return nil, nil, nil, fmt.Errorf("pipe %d: an end goes from %v to %v, want from %v to %v", id, l, r, local, splice.Addr())
		}
	}
	return c1, c2, stop, nil
}

// spliceRole joins each connection it accepts to one it dials back, until
// SIGTERM; it fails if a pipe could not be set up or a splice outlives the
// pipes it served.
func spliceRole() int {
	stop := terminated()
	lns, err := acrossListen()
	if err != nil {
		fmt.Fprintln(os.Stderr, "across-splice:", err)
		return 1
	}
	var (
		splices sync.WaitGroup
		failed  atomic.Int64
	)
	for _, ln := range lns {
		go func() {
			for {
				c, err := ln.AcceptRDMA()
				if err != nil {
					return // closed at SIGTERM
				}
				splices.Add(1)
				go func() {
					defer splices.Done()
					if err := splice(c); err != nil {
						fmt.Fprintln(os.Stderr, "across-splice:", err)
						failed.Add(1)
					}
				}()
			}
		}()
	}
	<-stop
	closeAll(lns)
	ended := make(chan struct{})
	go func() {
		splices.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(time.Minute):
		fmt.Fprintln(os.Stderr, "across-splice: splices still copying a minute after the test ended")
		return 1
	}
	if n := failed.Load(); n > 0 {
		fmt.Fprintf(os.Stderr, "across-splice: %d pipes failed\n", n)
		return 1
	}
	return 0
}

// splice reads in's header, dials back and copies both ways until both
// directions have ended.
func splice(in *rnet.Conn) error {
	defer in.Close()
	var hdr [spliceHeaderLen]byte
	in.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(in, hdr[:]); err != nil {
		return fmt.Errorf("reading the header from %v: %w", in.RemoteAddr(), err)
	}
	in.SetReadDeadline(time.Time{})
	back := netip.AddrPortFrom(in.RemoteAddr().(*rnet.Addr).Addr(), byteorder.BigEndian.Uint16(hdr[:2]))
	out, err := dialerFrom(in.LocalAddr().(*rnet.Addr).Addr()).Dial("rdma", back.String())
	if err != nil {
		return fmt.Errorf("dialling back to %v: %w", back, err)
	}
	defer out.Close()
	if _, err := out.Write(hdr[2:]); err != nil {
		return fmt.Errorf("sending the pipe's number to %v: %w", back, err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pump(out, in) }()
	go func() { defer wg.Done(); pump(in, out) }()
	wg.Wait()
	return nil
}

// pump copies src to dst as a TCP proxy does: src's end of stream becomes
// dst's CloseWrite, and any other end (the tests close and time out their
// ends at will) aborts both connections, so the other direction ends too.
func pump(dst, src *rnet.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				dst.Close()
				src.Close()
				return
			}
		}
		if errors.Is(err, io.EOF) {
			dst.CloseWrite()
			return
		}
		if err != nil {
			dst.Close()
			src.Close()
			return
		}
	}
}
