//go:build !linux || !cgo

package rnet

import (
	"context"
	"net"
	"net/netip"
)

func dial(ctx context.Context, _ settings, _ netip.Addr, raddr netip.AddrPort) (*Conn, error) {
	return nil, &net.OpError{Op: "dial", Net: "rdma", Addr: netAddr(raddr), Err: ErrNotSupported}
}

func listen(_ settings, _ string, laddr netip.AddrPort, _, _ int, _ func(net.Addr, error)) (*Listener, error) {
	return nil, &net.OpError{Op: "listen", Net: "rdma", Addr: netAddr(laddr), Err: ErrNotSupported}
}

func onIWARP(netip.Addr) bool { return false }
