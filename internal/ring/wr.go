package ring

// The types in this file cross the cgo boundary in arrays, so they are plain
// structs without Go pointers. Numeric values of the enumerations are those
// of <infiniband/verbs.h>, so the driver can pass them through unchanged.

// Region is one block of memory given to the engine, with the address the
// NIC and the peer use for Buf[0] and the keys it was registered with.
type Region struct {
	Buf  []byte
	Addr uint64
	LKey uint32
	RKey uint32
}

// SGE is one scatter/gather element (struct ibv_sge). Addr always lies inside
// a Region given to New.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Opcode is a send work request opcode (enum ibv_wr_opcode).
type Opcode uint32

const (
	OpWrite    Opcode = 0 // IBV_WR_RDMA_WRITE
	OpWriteImm Opcode = 1 // IBV_WR_RDMA_WRITE_WITH_IMM
	OpSend     Opcode = 2 // IBV_WR_SEND
)

func (o Opcode) String() string {
	switch o {
	case OpWrite:
		return "RDMA_WRITE"
	case OpWriteImm:
		return "RDMA_WRITE_WITH_IMM"
	case OpSend:
		return "SEND"
	}
	return "Opcode(?)"
}

// SendWR is one send work request (struct ibv_send_wr without the list
// link). Only SGE[:NumSGE] are meaningful.
type SendWR struct {
	ID         uint64
	Op         Opcode
	Imm        uint32 // host byte order; the driver applies htonl
	Inline     bool   // IBV_SEND_INLINE
	Signaled   bool   // IBV_SEND_SIGNALED; always true (sq_sig_all=1)
	NumSGE     int
	SGE        [2]SGE
	RemoteAddr uint64 // for OpWrite and OpWriteImm
	RKey       uint32
}

// Len is the total payload length of the work request.
func (w *SendWR) Len() uint32 {
	var n uint32
	for i := 0; i < w.NumSGE && i < len(w.SGE); i++ {
		n += w.SGE[i].Length
	}
	return n
}

// RecvWR is one receive work request. NumSGE is 0 on InfiniBand and RoCE
// (rsocket posts receives without buffers and reads only the immediate) and 1
// in iWARP mode, where SGE is a 4-byte slot for the message word.
type RecvWR struct {
	ID     uint64
	NumSGE int
	SGE    SGE
}

// WCStatus is a work completion status (enum ibv_wc_status).
type WCStatus uint32

const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCGeneralErr     WCStatus = 21
)

// PeerSide reports whether the status means that the peer's side failed
// the transfer: it never acknowledged it (retries exhausted, no receive
// posted), or its adapter refused it. A peer whose process dies shows as
// any of these, depending on which of its resources the kernel tore down
// first: a memory region gone before its QP refuses our RDMA writes with a
// remote access error. A hostile peer that advertised a bad buffer shows
// the same way, and is as good as gone.
func (s WCStatus) PeerSide() bool {
	switch s {
	case WCRemInvReqErr, WCRemAccessErr, WCRemOpErr, WCRetryExcErr, WCRNRRetryExcErr:
		return true
	}
	return false
}

func (s WCStatus) String() string {
	switch s {
	case WCSuccess:
		return "success"
	case WCLocLenErr:
		return "local length error"
	case WCLocQPOpErr:
		return "local QP operation error"
	case WCLocProtErr:
		return "local protection error"
	case WCWRFlushErr:
		return "work request flushed"
	case WCLocAccessErr:
		return "local access error"
	case WCRemInvReqErr:
		return "remote invalid request"
	case WCRemAccessErr:
		return "remote access error"
	case WCRemOpErr:
		return "remote operation error"
	case WCRetryExcErr:
		return "transport retry counter exceeded"
	case WCRNRRetryExcErr:
		return "RNR retry counter exceeded"
	case WCGeneralErr:
		return "general error"
	}
	return "status " + utoa(uint64(s))
}

// WCOpcode is a work completion opcode (enum ibv_wc_opcode).
type WCOpcode uint32

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// Completion is one work completion (the fields of struct ibv_wc the engine
// needs). For an error completion only ID and Status are reliable.
type Completion struct {
	ID        uint64
	Status    WCStatus
	Opcode    WCOpcode
	Imm       uint32 // host byte order; valid for WCRecvRDMAWithImm
	ByteLen   uint32
	VendorErr uint32
}

// utoa formats without fmt so the hot paths never pull it in by accident.
func utoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
