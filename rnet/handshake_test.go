//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/ring"
)

// TestRXEHostileHandshake sends the listener connection requests it must
// refuse or drop, then checks that it still accepts a well-behaved peer.
func TestRXEHostileHandshake(t *testing.T) {
	pair := rdmatest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ln, err := (&ListenConfig{Config: &Config{HandshakeTimeout: time.Second}}).Listen(ctx, "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	target := ln.Addr().(*Addr).AddrPort

	// request sends a connect request with the given private data from an
	// id without a queue pair, and returns the listener's answer. vanish
	// destroys the id right after the request; stall takes the listener's
	// accept (CONNECT_RESPONSE) and never completes the handshake (an id
	// without a QP sends no RTU), so the listener's HandshakeTimeout must
	// end it: request then returns the listener's giving up.
	request := func(t *testing.T, private []byte, vanish, stall bool) error {
		t.Helper()
		id, release := rawRequest(ctx, t, pair.Client, target, private, 0x1234)
		defer release()
		if vanish {
			return nil // the deferred release destroys the id mid-handshake
		}
		if stall {
			if _, err := id.Await(ctx, cm.EventConnectResponse); err != nil {
				t.Fatalf("listener did not accept: %v", err)
			}
			_, err = id.Await(ctx, cm.EventEstablished)
			return err
		}
		_, err = id.Await(ctx, cm.EventEstablished)
		return err
	}

	sane := ring.ConnData{
		Version: 1, Flags: ring.FlagIOMap, Credits: 16,
		TargetSGL: ring.RemoteSGE{Addr: 0x10000, Key: 7, Length: 2},
		DataBuf:   ring.RemoteSGE{Addr: 0x20000, Key: 7, Length: 1 << 16},
	}
	wrongVersion := sane
	wrongVersion.Version = 2
	noCredits := sane
	noCredits.Credits = 0
	for _, tc := range []struct {
		name    string
		private []byte
	}{
		{"Short", []byte{1, 2}}, // the CM pads it with zeros: no credits, no buffers
		{"WrongVersion", encode(wrongVersion)},
		{"NoCredits", encode(noCredits)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := request(t, tc.private, false, false)
			var rej *cm.RejectError
			if !errors.As(err, &rej) || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("listener answered %v, want a reject", err)
			}
		})
	}
	// The baselines come from a settled listener: the refusals above
	// reach the dialer before the listener has released their ids, and a
	// vanishing dialer returns before the listener has read its request.
	// Each request above and below counts one.
	settled := func(requests int) {
		t.Helper()
		done := make(chan struct{})
		go func() { ln.l.waitRequests(requests); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute): // a hang detector only
			t.Fatalf("the listener did not read and settle %d requests", requests)
		}
	}
	t.Run("Vanish", func(t *testing.T) {
		settled(3)
		gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
		request(t, encode(sane), true, false)
		settled(4)
		checkReleased(t, gor0, fds0, res0)
	})
	t.Run("TimesOut", func(t *testing.T) {
		settled(4)
		gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
		err := request(t, encode(sane), false, true)
		if err == nil {
			t.Fatal("a handshake without an RTU was established")
		}
		t.Logf("the listener gave up on a stalled handshake: %v", err)
		settled(5)
		checkReleased(t, gor0, fds0, res0)
	})

	// The listener is unharmed: a real connection works.
	go func() {
		c, err := ln.AcceptRDMA()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := (&Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}}).DialContext(ctx, "rdma", target.String())
	if err != nil {
		t.Fatalf("dial after hostile handshakes: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("still serving")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 13)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "still serving" {
		t.Fatalf("echo after hostile handshakes: %q, %v", buf, err)
	}
}

// checkReleased checks that what ended left nothing behind: goroutines
// (by identity), fds and the kernel's RDMA objects are as before.
func checkReleased(t *testing.T, before map[string]bool, fds0 int, res0 map[string]int) {
	t.Helper()
	if fresh := procstat.WaitNoNewGoroutines(before); len(fresh) > 0 {
		t.Errorf("%d goroutines left:\n%s", len(fresh), strings.Join(fresh, "\n\n"))
	}
	if fds := procstat.WaitOpenFDs(t, fds0); fds != fds0 {
		t.Errorf("open fds: %d before, %d after", fds0, fds)
	}
	res := procstat.WaitResources(t, res0)
	for _, k := range procstat.ResourceKinds {
		if res[k] != res0[k] {
			t.Errorf("%s in rdma resource show: %d before, %d after", k, res0[k], res[k])
		}
	}
}

// TestRXEDialFailuresRelease: a dial that fails after it has made its queue
// pair, rings and ids (cancelled while the peer has not answered, or
// answered with private data it cannot use) releases them all.
func TestRXEDialFailuresRelease(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	from := &Addr{netip.AddrPortFrom(pair.Client, 0)}
	// rawRequest listens with a bare connection manager id, dials it, and
	// returns the connection request with the dial's outcome to come.
	rawRequest := func(t *testing.T, ctx context.Context) (req cm.Event, dialed <-chan error, cleanup func()) {
		t.Helper()
		ch, lid, release := rawListener(t, netip.AddrPortFrom(pair.Server, 0))
		out := make(chan error, 1)
		go func() {
			c, err := (&Dialer{LocalAddr: from}).DialContext(ctx, "rdma", lid.LocalAddr().String())
			if c != nil {
				c.Close()
			}
			out <- err
		}()
		nctx, ncancel := context.WithTimeout(context.Background(), time.Minute)
		defer ncancel()
		ev, err := ch.Next(nctx)
		if err != nil || ev.Type != cm.EventConnectRequest {
			t.Fatalf("raw listener: %v, %v; want a connect request", ev.Type, err)
		}
		return ev, out, func() {
			ev.ID.Close()
			release()
		}
	}
	t.Run("CancelledAfterConnect", func(t *testing.T) {
		gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, dialed, cleanup := rawRequest(t, ctx)
		cancel() // the dialer waits for an answer that never comes
		if err := <-dialed; !errors.Is(err, context.Canceled) {
			t.Errorf("dial cancelled after its request = %v, want context.Canceled", err)
		}
		req.ID.Reject(nil)
		cleanup()
		checkReleased(t, gor0, fds0, res0)
	})
	t.Run("BadAcceptData", func(t *testing.T) {
		gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req, dialed, cleanup := rawRequest(t, ctx)
		bad := ring.ConnData{Version: 2, Flags: ring.FlagIOMap, Credits: 16,
			TargetSGL: ring.RemoteSGE{Addr: 0x10000, Key: 7, Length: 2},
			DataBuf:   ring.RemoteSGE{Addr: 0x20000, Key: 7, Length: 1 << 16}}
		p := cm.RsocketConnParam(encode(bad))
		p.QPNum = 0x1234
		if err := req.ID.Accept(p); err != nil {
			t.Fatal(err)
		}
		err := <-dialed
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "dial" || !errors.Is(err, ErrProtocol) {
			t.Errorf("dial answered with version 2 = %v, want a dial *net.OpError matching ErrProtocol", err)
		}
		var pe *ProtocolError
		if !errors.As(err, &pe) || !errors.Is(pe.Check, ring.ErrVersion) {
			t.Errorf("dial answered with version 2 = %v, want a *ProtocolError whose Check is ring.ErrVersion", err)
		}
		cleanup()
		checkReleased(t, gor0, fds0, res0)
	})
}

func encode(c ring.ConnData) []byte {
	b := c.Encode()
	return b[:]
}

// TestRXESetupFailuresRelease fails a connection's setup at each of its
// steps, on the dialling side and on the accepting one, as a device that
// refuses that resource would, and checks that whatever was made before is
// released, and that the listener goes on accepting.
func TestRXESetupFailuresRelease(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	errInjected := errors.New("injected setup failure")
	steps := []string{"pd", "mr0", "mr1", "mr2", "comp channel", "cq", "qp"}
	for _, accepting := range []bool{false, true} {
		side := "dial"
		if accepting {
			side = "accept"
		}
		for _, step := range append(steps, "migrate") {
			if step == "migrate" && !accepting {
				continue
			}
			t.Run(side+"/"+step, func(t *testing.T) {
				gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
				ln, err := Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
				if err != nil {
					t.Fatal(err)
				}
				var hit atomic.Int32
				hook := func(a bool, s string) error {
					if a == accepting && s == step && hit.Add(1) == 1 {
						return errInjected
					}
					return nil
				}
				testHookSetupStage.Store(&hook)
				defer testHookSetupStage.Store(nil)
				d := &Dialer{LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, Timeout: time.Minute}
				_, err = d.Dial("rdma", ln.Addr().String())
				switch {
				case hit.Load() != 1:
					t.Errorf("step %q was never reached", step)
				case !accepting && !errors.Is(err, errInjected):
					t.Errorf("dial failing at %q = %v, want the injected error", step, err)
				case accepting && err == nil:
					t.Errorf("dial to a listener failing at %q connected", step)
				}
				// The listener is unharmed: the next connection works.
				c1, err := d.Dial("rdma", ln.Addr().String())
				if err != nil {
					ln.Close()
					t.Fatalf("dial after the failure: %v", err)
				}
				c2, err := ln.AcceptRDMA()
				if err != nil {
					t.Fatal(err)
				}
				roundTripOnce(t, c1, c2)
				c1.Close()
				c2.Close()
				ln.Close()
				checkReleased(t, gor0, fds0, res0)
			})
		}
	}
}

func roundTripOnce(t *testing.T, a, b *Conn) {
	t.Helper()
	if _, err := a.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(b, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
}
