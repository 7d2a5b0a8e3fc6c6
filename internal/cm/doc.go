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
//
// # Files
//
// Each file uses only the files before it (on other platforms, stub.go and
// await_stub.go stand for the _linux ones):
//
//   - types.go: errors, event types, connection parameters, retries.
//   - addr_linux.go: addresses to and from C.
//   - channel_linux.go: EventChannel and its lifetime.
//   - id_linux.go: ID, the handles events name it by, and its calls.
//   - ownqp_linux.go: the queue pair rnet moves through its states itself
//     on InfiniBand and RoCE, with the path MTU both ports carry.
//   - devices_linux.go: ResyncDevices, so that librdmacm lets go of a
//     removed device.
//   - event.go: Event, and the error an error event stands for.
//   - await_linux.go: reading events, and waiting for an id's.
//   - cgo_test_helpers_linux.go: C the tests call (test files cannot use cgo).
package cm
