package cm

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// Error is verbs' error type: the call, the address, the errno.
type Error = verbs.Error

// ErrNoDevice is verbs.ErrNoDevice: no RDMA device, so no event channel.
var ErrNoDevice = verbs.ErrNoDevice

// ErrNotSupported is verbs.ErrNotSupported.
var ErrNotSupported = verbs.ErrNotSupported

// ErrUnreachable marks an UNREACHABLE event: the peer did not answer the
// connection request (or its reply was lost) within the CM's retries.
var ErrUnreachable = errors.New("rdma: peer unreachable")

// ErrDeviceRemoved marks a DEVICE_REMOVAL event.
var ErrDeviceRemoved = errors.New("rdma: device removed")

// errConnectError marks a connect that failed after rdma_connect returned,
// in a CONNECT_ERROR event, apart from one the call itself refused: the two
// have the same errnos and different causes.
var errConnectError = errors.New("rdma: handshake failed, reported by a CONNECT_ERROR event")

// EventType mirrors enum rdma_cm_event_type.
type EventType int

const (
	EventAddrResolved    EventType = 0
	EventAddrError       EventType = 1
	EventRouteResolved   EventType = 2
	EventRouteError      EventType = 3
	EventConnectRequest  EventType = 4
	EventConnectResponse EventType = 5
	EventConnectError    EventType = 6
	EventUnreachable     EventType = 7
	EventRejected        EventType = 8
	EventEstablished     EventType = 9
	EventDisconnected    EventType = 10
	EventDeviceRemoval   EventType = 11
	EventMulticastJoin   EventType = 12
	EventMulticastError  EventType = 13
	EventAddrChange      EventType = 14
	EventTimewaitExit    EventType = 15
)

var eventNames = [...]string{
	"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR",
	"CONNECT_REQUEST", "CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE",
	"REJECTED", "ESTABLISHED", "DISCONNECTED", "DEVICE_REMOVAL",
	"MULTICAST_JOIN", "MULTICAST_ERROR", "ADDR_CHANGE", "TIMEWAIT_EXIT",
}

// String is the name rdma_event_str gives, without "RDMA_CM_EVENT_".
func (t EventType) String() string {
	if t >= 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// ConnParam is struct rdma_conn_param. PrivateData is copied before the
// call; its limits are the transport's (RoCE/IB: 56 bytes in a connect, 196
// in an accept, 148 in a reject).
type ConnParam struct {
	PrivateData        []byte
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        uint8
	// RetryCount is the transport retry count of both ends' QPs on IB and
	// RoCE: the connection request carries the dialler's, and the
	// accepting side's QP takes it from there (so it is ignored when
	// accepting).
	RetryCount uint8
	// RNRRetryCount is how often the peer resends a message this side had
	// no receive posted for: the request carries the dialler's to the
	// accepting side's QP, the reply the accepting side's to the dialler's.
	RNRRetryCount uint8
	SRQ           uint8  // ignored when the ID has a QP
	QPNum         uint32 // ignored when the ID has a QP
	// PeerMTU reads, from the peer's private data (its request when
	// accepting, its reply when connecting), the largest path MTU in bytes
	// that the peer's port takes, 0 if it does not say. On InfiniBand and
	// RoCE the QP's path MTU is then at most that, as well as at most the
	// path's and the local port's active MTU. Nil: no limit from the peer.
	// It is not sent.
	PeerMTU func(privateData []byte) int
}

// MTUCode is the IB MTU code (enum ibv_mtu: 1 = 256 bytes, ..., 5 = 4096)
// of the largest IB MTU that is at most bytes, or 0 for less than 256.
func MTUCode(bytes int) uint8 {
	for code := uint8(5); code >= 1; code-- {
		if MTUBytes(code) <= bytes {
			return code
		}
	}
	return 0
}

// MTUBytes is the size of IB MTU code (1 to 5), or 0 for any other code.
func MTUBytes(code uint8) int {
	if code < 1 || code > 5 {
		return 0
	}
	return 128 << code
}

// RsocketConnParam is what rsocket connects with: flow control on, the
// most transport retries and RNR retries without limit (7 each). rsocket sets
// InitiatorDepth = 1 only on iWARP, since it never issues RDMA READ.
func RsocketConnParam(privateData []byte) ConnParam {
	return ConnParam{PrivateData: privateData, FlowControl: 1, RetryCount: 7, RNRRetryCount: 7}
}

// MaxAckTimeout is the largest exponent SetAckTimeout takes: the field is
// five bits wide (4.096 µs × 2^31, about 2.4 hours).
const MaxAckTimeout = 31

// MaxRetryCount is the largest RetryCount and RNRRetryCount: the fields are
// three bits wide, and rdma_cm quietly caps larger values at it. An
// RNRRetryCount of 7 means without limit; Soft-RoCE (rxe) also takes a
// RetryCount of 7 as without limit.
const MaxRetryCount = 7

// Retry says how address and route resolution is retried after a timeout:
// Tries attempts, the first with Timeout, each next one with twice the
// previous timeout.
type Retry struct {
	Tries   int
	Timeout time.Duration
}

// RsocketRetry is rsocket's policy: 6 tries, 1000·2^n ms.
var RsocketRetry = Retry{Tries: 6, Timeout: time.Second}

// RejectError is a REJECTED event: the peer's CM, or the application behind
// it, refused the connection. errors.Is(err, syscall.ECONNREFUSED) holds.
type RejectError struct {
	Addr string // the peer
	// Status is the event's status: on InfiniBand and RoCE the IB CM reject
	// reason (8: no one listens on that port, 28: rejected by the
	// application with rdma_reject); on iWARP a negative errno.
	Status      int
	PrivateData []byte // sent with the reject, if any (zero-padded on IB/RoCE)
}

// IB CM reject reasons (IBTA table "REJ reason") that rnet tells apart.
const (
	RejectInvalidServiceID = 8  // nothing listens on the port
	RejectConsumer         = 28 // the listener called rdma_reject
)

// ByApplication reports whether the listener's application rejected (as
// opposed to nothing listening).
func (e *RejectError) ByApplication() bool { return e.Status == RejectConsumer }

// NoListener reports whether nothing listened on the address.
func (e *RejectError) NoListener() bool {
	return e.Status == RejectInvalidServiceID || e.Status == -int(syscall.ECONNREFUSED)
}

func (e *RejectError) Error() string {
	why := fmt.Sprintf("connection rejected (status %d)", e.Status)
	switch {
	case e.ByApplication():
		why = fmt.Sprintf("connection rejected by the peer application (IB CM reason %d, consumer reject)", e.Status)
	case e.Status == RejectInvalidServiceID:
		why = fmt.Sprintf("connection refused: nothing listens there (IB CM reason %d, invalid service ID)", e.Status)
	case e.Status < 0:
		why = fmt.Sprintf("connection rejected: %v", syscall.Errno(-e.Status))
	}
	return "rdma_connect " + e.Addr + ": " + why
}

// Is makes errors.Is(err, syscall.ECONNREFUSED) true.
func (e *RejectError) Is(target error) bool { return target == syscall.ECONNREFUSED }

var errClosed = net.ErrClosed
