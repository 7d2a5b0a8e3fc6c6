package verbs

import "fmt"

// The work request and completion types below are plain values without Go
// pointers, so a slice of them can be handed to C as is. Their layout is part
// of the API: internal/ring defines structs with the same fields in the same
// order and types (all enums are uint32), so the driver can reinterpret a
// ring slice as a verbs slice without copying. layout_test.go pins it down and
// the cgo code checks it against the C mirror at compile time.
//
//	SendWR      size 80: ID@0 Op@8 Imm@12 Inline@16 Signaled@17 NumSGE@24 SGE@32 RemoteAddr@64 RKey@72
//	SGE         size 16: Addr@0 Length@8 LKey@12
//	RecvWR      size 32: ID@0 NumSGE@8 SGE@16
//	Completion  size 32: ID@0 Status@8 Opcode@12 Imm@16 ByteLen@20 VendorErr@24

// MaxBatch is how many work requests one crossing into C posts (the C side
// builds the chain in stack arrays of this size); longer slices are posted
// in several crossings.
const MaxBatch = 32

// SendOp is the operation of a send work request. The values are those of
// enum ibv_wr_opcode.
type SendOp uint32

const (
	OpWrite    SendOp = 0 // IBV_WR_RDMA_WRITE
	OpWriteImm SendOp = 1 // IBV_WR_RDMA_WRITE_WITH_IMM
	OpSend     SendOp = 2 // IBV_WR_SEND
	OpSendImm  SendOp = 3 // IBV_WR_SEND_WITH_IMM
)

func (o SendOp) String() string {
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
	return fmt.Sprintf("SendOp(%d)", uint32(o))
}

// SGE is a scatter/gather element: Length bytes at Addr, inside the memory
// region whose local key is LKey. Addr is an address in mmap'd memory (see
// MR.Addr), never a Go pointer.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is one send work request.
//
// Inline asks the device to copy the payload at post time (ibv_post_send
// returns before the send completes, and the SGEs may be reused at once); the
// SGEs still point at registered memory. Imm is in host byte order; the C side
// converts it to the big-endian wire format.
type SendWR struct {
	ID         uint64
	Op         SendOp
	Imm        uint32
	Inline     bool
	Signaled   bool
	NumSGE     int // 0, 1 or 2
	SGE        [2]SGE
	RemoteAddr uint64
	RKey       uint32
}

// RecvWR is one receive work request with 0 or 1 SGE. rsocket posts its
// receives without an SGE: a write-with-immediate consumes a receive but only
// its immediate is delivered.
type RecvWR struct {
	ID     uint64
	NumSGE int // 0 or 1
	SGE    SGE
}

// Completion is one work completion. Imm is in host byte order and is 0 when
// the completion carries no immediate.
type Completion struct {
	ID        uint64
	Status    WCStatus
	Opcode    WCOpcode
	Imm       uint32
	ByteLen   uint32
	VendorErr uint32
}

// Err returns nil for a successful completion and a *WCError otherwise.
// qpNum names the QP the completion's CQ serves (rnet uses one CQ per QP).
func (c *Completion) Err(qpNum uint32) error {
	if c.Status == WCSuccess {
		return nil
	}
	return &WCError{Status: c.Status, Opcode: c.Opcode, QPNum: qpNum, VendorErr: c.VendorErr, ID: c.ID}
}

// WCError is a completion that failed.
type WCError struct {
	Status    WCStatus
	Opcode    WCOpcode
	QPNum     uint32
	VendorErr uint32
	ID        uint64
}

func (e *WCError) Error() string {
	// The opcode of a failed completion is not defined by the verbs spec
	// (only wr_id and status are); it is reported as the provider filled it.
	return fmt.Sprintf("work completion failed on QP %#x: %s (%s), opcode %s, vendor error %#x, wr_id %#x",
		e.QPNum, e.Status.Name(), e.Status.Description(), e.Opcode, e.VendorErr, e.ID)
}

// WCStatus mirrors enum ibv_wc_status.
type WCStatus uint32

const (
	WCSuccess          WCStatus = 0
	WCLocLenErr        WCStatus = 1
	WCLocQPOpErr       WCStatus = 2
	WCLocEECOpErr      WCStatus = 3
	WCLocProtErr       WCStatus = 4
	WCWRFlushErr       WCStatus = 5
	WCMWBindErr        WCStatus = 6
	WCBadRespErr       WCStatus = 7
	WCLocAccessErr     WCStatus = 8
	WCRemInvReqErr     WCStatus = 9
	WCRemAccessErr     WCStatus = 10
	WCRemOpErr         WCStatus = 11
	WCRetryExcErr      WCStatus = 12
	WCRNRRetryExcErr   WCStatus = 13
	WCLocRDDViolErr    WCStatus = 14
	WCRemInvRdReqErr   WCStatus = 15
	WCRemAbortErr      WCStatus = 16
	WCInvEECNErr       WCStatus = 17
	WCInvEECStateErr   WCStatus = 18
	WCFatalErr         WCStatus = 19
	WCRespTimeoutErr   WCStatus = 20
	WCGeneralErr       WCStatus = 21
	WCTMErr            WCStatus = 22
	WCTMRndvIncomplete WCStatus = 23
)

// Our own table, so that names are available without cgo (and without a
// crossing); wcstatus_test checks it against the C enum.
var wcStatusNames = [...]struct{ name, desc string }{
	{"IBV_WC_SUCCESS", "success"},
	{"IBV_WC_LOC_LEN_ERR", "local length error"},
	{"IBV_WC_LOC_QP_OP_ERR", "local QP operation error"},
	{"IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error"},
	{"IBV_WC_LOC_PROT_ERR", "local protection error"},
	{"IBV_WC_WR_FLUSH_ERR", "Work Request Flushed Error"},
	{"IBV_WC_MW_BIND_ERR", "memory management operation error"},
	{"IBV_WC_BAD_RESP_ERR", "bad response error"},
	{"IBV_WC_LOC_ACCESS_ERR", "local access error"},
	{"IBV_WC_REM_INV_REQ_ERR", "remote invalid request error"},
	{"IBV_WC_REM_ACCESS_ERR", "remote access error"},
	{"IBV_WC_REM_OP_ERR", "remote operation error"},
	{"IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded"},
	{"IBV_WC_RNR_RETRY_EXC_ERR", "RNR retry counter exceeded"},
	{"IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation error"},
	{"IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request"},
	{"IBV_WC_REM_ABORT_ERR", "aborted error"},
	{"IBV_WC_INV_EECN_ERR", "invalid EE context number"},
	{"IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state"},
	{"IBV_WC_FATAL_ERR", "fatal error"},
	{"IBV_WC_RESP_TIMEOUT_ERR", "response timeout error"},
	{"IBV_WC_GENERAL_ERR", "general error"},
	{"IBV_WC_TM_ERR", "TM error"},
	{"IBV_WC_TM_RNDV_INCOMPLETE", "TM software rendezvous"},
}

// Name is the C enumerator, e.g. "IBV_WC_RETRY_EXC_ERR".
func (s WCStatus) Name() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s].name
	}
	return fmt.Sprintf("IBV_WC_STATUS(%d)", uint32(s))
}

// Description is the text ibv_wc_status_str gives.
func (s WCStatus) Description() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s].desc
	}
	return "unknown"
}

func (s WCStatus) String() string { return s.Name() }

// WCOpcode mirrors enum ibv_wc_opcode.
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
	return fmt.Sprintf("IBV_WC_OPCODE(%d)", uint32(o))
}

// IsRecv reports whether the completion is for a receive work request.
func (o WCOpcode) IsRecv() bool { return o&WCRecv != 0 }
