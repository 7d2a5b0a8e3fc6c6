//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// TestRXEHandshakeErrorHook: a request the listener refuses reaches its
// HandshakeError hook with the cause and the dialer's address, and the
// reject carries the reason in rejectReason's format.
func TestRXEHandshakeErrorHook(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a guard against a hang
	defer cancel()
	type failure struct {
		remote net.Addr
		err    error
	}
	failures := make(chan failure, 1)
	ln, err := (&ListenConfig{HandshakeError: func(remote net.Addr, err error) {
		select {
		case failures <- failure{remote, err}:
		default:
			t.Errorf("a second HandshakeError(%v, %v)", remote, err)
		}
	}}).Listen(ctx, "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	// A request whose private data speaks rsocket version 2, from an id
	// without a queue pair.
	id, release := rawRequest(ctx, t, pair.Client, ln.Addr().(*Addr).AddrPort, []byte{2}, 0x1234)
	defer release()
	_, err = id.Await(ctx, cm.EventEstablished)
	var re *cm.RejectError
	if !errors.As(err, &re) {
		t.Fatalf("listener answered %v, want a reject", err)
	}
	if r, ok := decodeRejectReason(re.PrivateData); !ok || r.code != rejectBadRequest {
		t.Errorf("reject private data % x decodes to %+v, %v; want reason %d", re.PrivateData, r, ok, rejectBadRequest)
	}
	t.Logf("as an rnet dialer would say it: %v", explainReject(err))
	var f failure
	select {
	case f = <-failures:
	case <-ctx.Done():
		t.Fatal("no HandshakeError")
	}
	t.Logf("HandshakeError(%v, %v)", f.remote, f.err)
	var oe *net.OpError
	if !errors.Is(f.err, ErrProtocol) || !errors.As(f.err, &oe) || oe.Op != "accept" {
		t.Errorf("HandshakeError err = %v, want an accept *net.OpError matching ErrProtocol", f.err)
	}
	if a, ok := f.remote.(*Addr); !ok || a.Addr() != pair.Client || a.AddrPort != id.LocalAddr() {
		t.Errorf("HandshakeError remote = %v, want the requesting id's address %v", f.remote, id.LocalAddr())
	}
	release()
	ln.Close()
	checkReleased(t, gor0, fds0, res0)
}
