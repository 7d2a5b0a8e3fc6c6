// Package cm is rnet's cgo binding to librdmacm: it sets up reliable
// connections (RDMA_PS_TCP ids, RC QPs) the way rsocket does and reports the
// connection manager's events as Go values.
//
// An EventChannel delivers the events of the IDs created on (or migrated to)
// it; a goroutine waits for them parked in the netpoller. Every event is
// copied out and acknowledged inside the same C call, so an event is
// acknowledged exactly once and rdma_destroy_id / rdma_migrate_id never wait
// for the Go side.
//
// Verbs objects are made on the device an ID is bound to: ID.Context returns
// that device as a *verbs.Context, and CreateQP takes verbs' PD and CQs.
// Only this package and internal/verbs call C.
package cm
