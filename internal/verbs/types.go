package verbs

import (
	"fmt"
	"net/netip"
)

// Transport is how a device moves RDMA traffic.
type Transport int

const (
	TransportUnknown    Transport = iota
	TransportInfiniBand           // native InfiniBand link layer
	TransportRoCE                 // InfiniBand transport over Ethernet (RoCE v1/v2; rxe)
	TransportIWARP                // iWARP over TCP (siw)
)

func (t Transport) String() string {
	switch t {
	case TransportInfiniBand:
		return "InfiniBand"
	case TransportRoCE:
		return "RoCE"
	case TransportIWARP:
		return "iWARP"
	}
	return "unknown"
}

// PortState mirrors enum ibv_port_state.
type PortState uint32

const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

func (s PortState) String() string {
	switch s {
	case PortNop:
		return "NOP"
	case PortDown:
		return "DOWN"
	case PortInit:
		return "INIT"
	case PortArmed:
		return "ARMED"
	case PortActive:
		return "ACTIVE"
	case PortActiveDefer:
		return "ACTIVE_DEFER"
	}
	return fmt.Sprintf("PortState(%d)", uint32(s))
}

// LinkLayer mirrors IBV_LINK_LAYER_*.
type LinkLayer uint8

const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "unspecified"
}

// GIDType mirrors enum ibv_gid_type.
type GIDType uint32

const (
	GIDTypeIB     GIDType = 0
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

func (g GIDType) String() string {
	switch g {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("GIDType(%d)", uint32(g))
}

// GUID is a node GUID in network byte order.
type GUID [8]byte

func (g GUID) String() string {
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7])
}

// GIDEntry is one valid entry of a port's GID table.
type GIDEntry struct {
	Index   int
	Type    GIDType
	GID     [16]byte
	Addr    netip.Addr // the IP the GID stands for (RoCE only; ::ffff:a.b.c.d is unmapped to IPv4); invalid for IB GIDs
	Ifindex int        // the netdev the GID belongs to (RoCE), 0 if none
}

// PortInfo describes one port of a device. Port numbers start at 1.
type PortInfo struct {
	Num         int
	State       PortState
	LinkLayer   LinkLayer
	ActiveMTU   int // bytes (256..4096)
	MaxMTU      int // bytes
	MaxMsgSize  uint32
	GIDTableLen int
	GIDs        []GIDEntry
}

// VendorSoftRoCE is the vendor ID of Soft-RoCE (rxe) devices.
const VendorSoftRoCE = 0xFFFFFF

// VendorSoftIWARP is the vendor ID of SoftiWARP (siw) devices ("bmt").
const VendorSoftIWARP = 0x626d74

// DeviceInfo describes a device as ibv_query_device and friends see it.
type DeviceInfo struct {
	Name      string
	NodeGUID  GUID
	Transport Transport
	VendorID  uint32 // IEEE OUI of the adapter's vendor; VendorSoftRoCE for rxe
	FWVersion string
	MaxQP     int
	MaxQPWR   int
	MaxSGE    int
	MaxSGERD  int
	MaxCQ     int
	MaxCQE    int
	MaxMR     int
	MaxMRSize uint64
	// MaxSRQ, MaxSRQWR and MaxSRQSGE are the device's shared receive queue
	// limits; MaxSRQ 0 means it has none.
	MaxSRQ    int
	MaxSRQWR  int
	MaxSRQSGE int
	// MaxInlineData is not part of ibv_device_attr: it is found by creating
	// throw-away RC QPs (send queue 16, 2 SGEs, as rsocket asks) with growing
	// max_inline_data until creation fails. 0 means the probe failed. The
	// value a real connection gets is what cm's CreateQP reports back.
	MaxInlineData int
	Ports         []PortInfo
}

// Access is a set of memory region access flags (IBV_ACCESS_*).
type Access uint32

const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
)

func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	s := ""
	for _, f := range []struct {
		bit  Access
		name string
	}{{AccessLocalWrite, "LOCAL_WRITE"}, {AccessRemoteWrite, "REMOTE_WRITE"}, {AccessRemoteRead, "REMOTE_READ"}, {AccessRemoteAtomic, "REMOTE_ATOMIC"}} {
		if a&f.bit != 0 {
			if s != "" {
				s += "|"
			}
			s += f.name
			a &^= f.bit
		}
	}
	if a != 0 {
		s += fmt.Sprintf("|%#x", uint32(a))
	}
	return s
}

// QPState mirrors enum ibv_qp_state.
type QPState uint32

const (
	QPReset QPState = iota
	QPInit
	QPRTR
	QPRTS
	QPSQD
	QPSQE
	QPErr
	QPUnknown
)

func (s QPState) String() string {
	names := [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("QPState(%d)", uint32(s))
}

// QPCaps are the queue sizes asked for when a QP is created and, after
// creation, what the device granted.
type QPCaps struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// SRQCaps are the sizes of a shared receive queue: asked for when it is
// created and, after creation, what the device granted.
type SRQCaps struct {
	MaxWR  uint32
	MaxSGE uint32
}

// AsyncEventType mirrors enum ibv_event_type, the events a device reports
// about its objects outside any completion queue.
type AsyncEventType uint32

const (
	EventCQErr           AsyncEventType = 0
	EventQPFatal         AsyncEventType = 1
	EventQPReqErr        AsyncEventType = 2
	EventQPAccessErr     AsyncEventType = 3
	EventCommEst         AsyncEventType = 4
	EventDeviceFatal     AsyncEventType = 8
	EventPortActive      AsyncEventType = 9
	EventPortErr         AsyncEventType = 10
	EventSRQErr          AsyncEventType = 14
	EventSRQLimitReached AsyncEventType = 15
	EventQPLastWQE       AsyncEventType = 16
)

func (e AsyncEventType) String() string {
	switch e {
	case EventCQErr:
		return "IBV_EVENT_CQ_ERR"
	case EventQPFatal:
		return "IBV_EVENT_QP_FATAL"
	case EventQPReqErr:
		return "IBV_EVENT_QP_REQ_ERR"
	case EventQPAccessErr:
		return "IBV_EVENT_QP_ACCESS_ERR"
	case EventCommEst:
		return "IBV_EVENT_COMM_EST"
	case EventDeviceFatal:
		return "IBV_EVENT_DEVICE_FATAL"
	case EventPortActive:
		return "IBV_EVENT_PORT_ACTIVE"
	case EventPortErr:
		return "IBV_EVENT_PORT_ERR"
	case EventSRQErr:
		return "IBV_EVENT_SRQ_ERR"
	case EventSRQLimitReached:
		return "IBV_EVENT_SRQ_LIMIT_REACHED"
	case EventQPLastWQE:
		return "IBV_EVENT_QP_LAST_WQE_REACHED"
	}
	return fmt.Sprintf("IBV_EVENT(%d)", uint32(e))
}

// AsyncEvent is one event of a device's asynchronous event queue.
type AsyncEvent struct {
	Type AsyncEventType
	// QPNum is the QP the event is about (QP events), else 0.
	QPNum uint32
	// Port is the port the event is about (port events), else 0.
	Port int
	// srq is the struct ibv_srq* of an SRQ event, else 0.
	srq uintptr
}

// QPAttrs are a QP's state and reliable-transport settings, as
// ibv_query_qp reports them.
type QPAttrs struct {
	State QPState
	// AckTimeout is the local ACK timeout, 4.096 µs × 2^AckTimeout (0: no
	// timer).
	AckTimeout uint8
	// RetryCount is how often unacknowledged packets are resent before the
	// send fails with IBV_WC_RETRY_EXC_ERR.
	RetryCount uint8
	// RNRRetry is how often a message the peer had no receive for is
	// resent (7: without limit).
	RNRRetry uint8
	// MinRNRTimer is the code of the wait this QP asks of a sender it
	// refuses for want of a receive.
	MinRNRTimer uint8
}

// QPPath is where a connected QP sends, as ibv_query_qp reports it.
type QPPath struct {
	Port    int // the device port, from 1
	PathMTU int // bytes (256..4096); 0 if the device reports none (iWARP)
	// GIDIndex is the source GID's index in the port's GID table, and
	// TrafficClass and HopLimit the global route header's fields: on RoCE
	// the IP header's TOS byte and TTL. They mean something only with
	// GlobalRoute.
	GIDIndex     int
	TrafficClass uint8
	HopLimit     uint8
	ServiceLevel uint8 // the InfiniBand service level (on RoCE, the priority the kernel derived from the TOS)
	GlobalRoute  bool  // the QP sends with a global route header (always on RoCE)
	// DestQPNum is the peer's QP number, which this QP sends to.
	DestQPNum uint32
}
