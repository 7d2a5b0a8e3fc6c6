//go:build !linux || !cgo

package cm

// Waiting for events fails here as every other call does (see stub.go).

import (
	"context"
	"net/netip"
)

func (ch *EventChannel) Next(ctx context.Context) (Event, error) {
	return Event{}, unsupported("rdma_get_cm_event")
}

func (id *ID) Resolve(ctx context.Context, src netip.Addr, dst netip.AddrPort, r Retry) error {
	return unsupported("rdma_resolve_addr")
}

func (id *ID) Await(ctx context.Context, want EventType) (Event, error) {
	return Event{}, unsupported("rdma_get_cm_event")
}
