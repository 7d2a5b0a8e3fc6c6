// Package wr is the work-request vocabulary that the engine (internal/ring)
// writes and the device binding (internal/verbs) posts: one definition of
// each type, so that a slice passes from one to the other without a cast.
//
// The types are plain values without Go pointers, so a slice of them can be
// handed to C as is. Their layout is therefore part of the API: the cgo code
// in internal/verbs mirrors it in C and checks it at compile time and in
// TestLayoutMatchesC. Enumeration values are those of <infiniband/verbs.h>.
package wr

import "strconv"

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at Addr,
// inside the registered memory region whose local key is LKey. Addr is an
// address in registered memory, never a Go pointer.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Opcode is the operation of a send work request (enum ibv_wr_opcode).
type Opcode uint32

const (
	OpWrite    Opcode = 0 // IBV_WR_RDMA_WRITE
	OpWriteImm Opcode = 1 // IBV_WR_RDMA_WRITE_WITH_IMM
	OpSend     Opcode = 2 // IBV_WR_SEND
	OpSendImm  Opcode = 3 // IBV_WR_SEND_WITH_IMM
)

func (o Opcode) String() string {
	switch o {
	case OpWrite:
		return "RDMA_WRITE"
	case OpWriteImm:
		return "RDMA_WRITE_WITH_IMM"
	case OpSend:
		return "SEND"
	case OpSendImm:
		return "SEND_WITH_IMM"
	}
	return "Opcode(" + strconv.FormatUint(uint64(o), 10) + ")"
}

// Send is one send work request (struct ibv_send_wr without the list link).
// Only SGE[:NumSGE] are meaningful. Inline asks the device to copy the
// payload at post time, so the SGEs may be reused at once; they still point
// at registered memory. Imm is in host byte order; the C side converts it.
type Send struct {
	ID         uint64
	Op         Opcode
	Imm        uint32
	Inline     bool // IBV_SEND_INLINE
	Signaled   bool // IBV_SEND_SIGNALED
	NumSGE     int  // 0, 1 or 2
	SGE        [2]SGE
	RemoteAddr uint64 // for OpWrite and OpWriteImm
	RKey       uint32
}

// Len is the total payload length of the work request.
func (w *Send) Len() uint32 {
	var n uint32
	for i := 0; i < w.NumSGE && i < len(w.SGE); i++ {
		n += w.SGE[i].Length
	}
	return n
}

// Recv is one receive work request with 0 or 1 SGE. rsocket posts its
// receives without an SGE on InfiniBand and RoCE (a write-with-immediate
// consumes a receive but delivers only its immediate) and with one 4-byte
// slot for the message word on iWARP.
type Recv struct {
	ID     uint64
	NumSGE int // 0 or 1
	SGE    SGE
}

// Completion is one work completion (the fields of struct ibv_wc rnet
// uses). Imm is in host byte order and 0 when the completion carries none.
// For an error completion only ID and Status are reliable.
type Completion struct {
	ID        uint64
	Status    WCStatus
	Opcode    WCOpcode
	Imm       uint32
	ByteLen   uint32
	VendorErr uint32
	QPNum     uint32 // the local QP the work request was on
}

// WCOpcode is a work completion opcode (enum ibv_wc_opcode).
type WCOpcode uint32

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCTSO             WCOpcode = 7
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// IsRecv reports whether the completion is for a receive work request.
func (o WCOpcode) IsRecv() bool { return o&WCRecv != 0 }

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "IBV_WC_SEND"
	case WCRDMAWrite:
		return "IBV_WC_RDMA_WRITE"
	case WCRDMARead:
		return "IBV_WC_RDMA_READ"
	case WCCompSwap:
		return "IBV_WC_COMP_SWAP"
	case WCFetchAdd:
		return "IBV_WC_FETCH_ADD"
	case WCBindMW:
		return "IBV_WC_BIND_MW"
	case WCLocalInv:
		return "IBV_WC_LOCAL_INV"
	case WCTSO:
		return "IBV_WC_TSO"
	case WCRecv:
		return "IBV_WC_RECV"
	case WCRecvRDMAWithImm:
		return "IBV_WC_RECV_RDMA_WITH_IMM"
	}
	return "IBV_WC_OPCODE(" + strconv.FormatUint(uint64(o), 10) + ")"
}
