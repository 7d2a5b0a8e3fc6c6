//go:build linux && cgo

package rnet

import (
	"net/netip"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// onIWARP reports whether addr is served by an iWARP device, whose
// connections take TCP ports: it binds a connection-manager id to it and
// asks the device.
func onIWARP(addr netip.Addr) bool {
	if addr.IsUnspecified() {
		return false // several devices may serve it; the caller's error stands
	}
	ch, err := cm.NewEventChannel()
	if err != nil {
		return false
	}
	defer ch.Close()
	id, err := ch.NewID()
	if err != nil {
		return false
	}
	defer id.Close()
	if id.Bind(netip.AddrPortFrom(addr, 0)) != nil {
		return false
	}
	ctx, err := id.Context()
	if err != nil {
		return false
	}
	info, err := ctx.Query()
	return err == nil && info.Transport == verbs.TransportIWARP
}
