//go:build linux && cgo

package rnet

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
)

// The tests that speak the connection manager's handshake by hand, as a
// hostile or broken peer would, use these bare ids: no queue pair, no
// rsocket engine.

// rawCMID is a connection manager id on an event channel of its own;
// release destroys both, once however often it is called.
func rawCMID(t testing.TB) (ch *cm.EventChannel, id *cm.ID, release func()) {
	t.Helper()
	ch, err := cm.NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	id, err = ch.NewID()
	if err != nil {
		ch.Close()
		t.Fatal(err)
	}
	return ch, id, sync.OnceFunc(func() {
		id.Close()
		ch.Close()
	})
}

// rawRequest sends target a connection request from local, on a fresh
// rawCMID, with private data padded as rsocket pads it and the queue pair
// number qpn (an id without a queue pair never sends RTU). release
// destroys the id: a handshake still under way then vanishes.
func rawRequest(ctx context.Context, t testing.TB, local netip.Addr, target netip.AddrPort, private []byte, qpn uint32) (id *cm.ID, release func()) {
	t.Helper()
	_, id, release = rawCMID(t)
	if err := id.Resolve(ctx, local, target, cm.Retry{Tries: 3, Timeout: time.Second}); err != nil {
		release()
		t.Fatal(err)
	}
	p := cm.RsocketConnParam(private)
	p.QPNum = qpn
	if err := id.Connect(p); err != nil {
		release()
		t.Fatal(err)
	}
	return id, release
}

// rawListener listens on addr with a rawCMID, which answers nothing by
// itself; release destroys it.
func rawListener(t testing.TB, addr netip.AddrPort) (ch *cm.EventChannel, id *cm.ID, release func()) {
	t.Helper()
	ch, id, release = rawCMID(t)
	if err := id.Bind(addr); err != nil {
		release()
		t.Fatal(err)
	}
	if err := id.Listen(8); err != nil {
		release()
		t.Fatal(err)
	}
	return ch, id, release
}
