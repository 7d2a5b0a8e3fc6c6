//go:build !linux || !cgo

package cm

import (
	"net/netip"
	"time"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// Without Linux and cgo there is no RDMA: NewEventChannel fails with
// ErrNotSupported, so no ID ever exists and its methods only report that.

type EventChannel struct{}
type ID struct{}

func unsupported(op string) error { return &Error{Op: op, Err: ErrNotSupported} }

func NewEventChannel() (*EventChannel, error) { return nil, unsupported("rdma_create_event_channel") }
func ResyncDevices()                          {}

func (ch *EventChannel) SetDeadline(t time.Time) error { return unsupported("SetDeadline") }
func (ch *EventChannel) Close() error                  { return nil }
func (ch *EventChannel) NewID() (*ID, error)           { return nil, unsupported("rdma_create_id") }

func (id *ID) Bind(addr netip.AddrPort) error { return unsupported("rdma_bind_addr") }
func (id *ID) SetAFOnly(only bool) error      { return unsupported("rdma_set_option") }
func (id *ID) Listen(backlog int) error       { return unsupported("rdma_listen") }
func (id *ID) SetAckTimeout(exp uint8) error  { return unsupported("rdma_set_option") }
func (id *ID) SetTOS(tos uint8) error         { return unsupported("rdma_set_option") }
func (id *ID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	return unsupported("rdma_resolve_addr")
}
func (id *ID) ResolveRoute(timeout time.Duration) error { return unsupported("rdma_resolve_route") }
func (id *ID) Connect(p ConnParam) error                { return unsupported("rdma_connect") }
func (id *ID) Accept(p ConnParam) error                 { return unsupported("rdma_accept") }
func (id *ID) Reject(privateData []byte) error          { return unsupported("rdma_reject") }
func (id *ID) Disconnect() error                        { return unsupported("rdma_disconnect") }
func (id *ID) DisconnectKeepingQP() error               { return unsupported("rdma_disconnect") }
func (id *ID) Migrate(to *EventChannel) error           { return unsupported("rdma_migrate_id") }
func (id *ID) Channel() *EventChannel                   { return nil }
func (id *ID) Context() (*verbs.Context, error)         { return nil, unsupported("rdma_cm_id verbs") }
func (id *ID) QP() *verbs.QP                            { return nil }
func (id *ID) LocalAddr() netip.AddrPort                { return netip.AddrPort{} }
func (id *ID) RemoteAddr() netip.AddrPort               { return netip.AddrPort{} }
func (id *ID) Close() error                             { return nil }
func (id *ID) CreateQP(pd *verbs.PD, send, recv *verbs.CQ, caps verbs.QPCaps) (*verbs.QP, error) {
	return nil, unsupported("rdma_create_qp")
}
func (id *ID) CreateQPOnSRQ(pd *verbs.PD, send, recv *verbs.CQ, srq *verbs.SRQ, caps verbs.QPCaps) (*verbs.QP, error) {
	return nil, unsupported("rdma_create_qp")
}
