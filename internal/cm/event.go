package cm

import (
	"fmt"
	"syscall"
)

// Event is one connection manager event, already acknowledged.
type Event struct {
	Type EventType
	// Status is the event's status: 0, a negative errno, or for REJECTED on
	// IB/RoCE the IB CM reject reason.
	Status int
	// ID is the id the event is about; for CONNECT_REQUEST it is the new
	// id for the incoming connection, on the listener's channel.
	ID *ID
	// Listener is the listening id, for CONNECT_REQUEST.
	Listener *ID
	// Param holds the connection parameters and a copy of the private data
	// of CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED (the peer's accept
	// data, on the active side) and REJECTED.
	Param ConnParam
	// Addr is the peer's address (host:port) as the id knew it, for errors.
	Addr string
}

func (e *Event) String() string {
	return fmt.Sprintf("%v status %d addr %s", e.Type, e.Status, e.Addr)
}

// Err turns an error event into an error naming the failed step, the
// address and the cause; it returns nil for other events.
func (e *Event) Err() error {
	switch e.Type {
	case EventAddrError:
		return &Error{Op: "rdma_resolve_addr", Addr: e.Addr, Errno: statusErrno(e.Status)}
	case EventRouteError:
		return &Error{Op: "rdma_resolve_route", Addr: e.Addr, Errno: statusErrno(e.Status)}
	case EventUnreachable:
		return &Error{Op: "rdma_connect", Addr: e.Addr, Errno: statusErrno(e.Status), Err: ErrUnreachable}
	case EventRejected:
		return &RejectError{Addr: e.Addr, Status: e.Status, PrivateData: e.Param.PrivateData}
	case EventConnectError:
		return &Error{Op: "rdma_connect", Addr: e.Addr, Errno: statusErrno(e.Status), Err: errConnectError}
	case EventDeviceRemoval:
		return &Error{Op: "rdma_get_cm_event", Addr: e.Addr, Err: ErrDeviceRemoved}
	}
	return nil
}

// statusErrno reads an event status as an errno; librdmacm reports negative
// errnos there.
func statusErrno(status int) syscall.Errno {
	if status < 0 {
		return syscall.Errno(-status)
	}
	return syscall.EIO
}
