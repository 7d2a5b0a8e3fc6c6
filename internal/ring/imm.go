package ring

import "strconv"

// Every rsocket message is a 32-bit word: the immediate of an RDMA WRITE
// WITH IMMEDIATE (big-endian on the wire, host order in this package), or,
// in iWARP mode, the 4-byte payload of an inline SEND (host byte order of the
// sender). Bits 31..29 hold the operation, bits 28..0 its argument.

// MsgOp is the operation of a message word.
type MsgOp uint8

const (
	MsgData         MsgOp = 0 // bytes written into the receiver's rbuf
	MsgRsvdDataMore MsgOp = 1 // reserved; never valid on the wire
	MsgWrite        MsgOp = 2 // direct write bookkeeping; never on the wire
	MsgRsvdDRAMore  MsgOp = 3 // reserved
	MsgSGL          MsgOp = 4 // credit grant; data = rseq_no + rq_size
	MsgRsvd         MsgOp = 5 // reserved
	MsgIOMapSGL     MsgOp = 6 // iomap entry index just written
	MsgCtrl         MsgOp = 7 // control: CtrlDisconnect, CtrlKeepalive, CtrlShutdown
)

var msgOpNames = [8]string{"DATA", "RSVD_DATA_MORE", "WRITE", "RSVD_DRA_MORE", "SGL", "RSVD", "IOMAP_SGL", "CTRL"}

func (o MsgOp) String() string {
	if int(o) < len(msgOpNames) {
		return msgOpNames[o]
	}
	return "MsgOp(" + strconv.Itoa(int(o)) + ")"
}

// Control message arguments (data of a MsgCtrl word).
const (
	CtrlDisconnect uint32 = 0
	CtrlKeepalive  uint32 = 1
	CtrlShutdown   uint32 = 2
)

// MaxMsgData is the largest argument a message word can carry (29 bits).
const MaxMsgData = 1<<29 - 1

// Msg is one message word in host byte order.
type Msg uint32

// MakeMsg builds a message word. data is truncated to 29 bits, exactly as
// rsocket's rs_msg_set does when it ORs an int into the word.
func MakeMsg(op MsgOp, data uint32) Msg {
	return Msg(uint32(op&7)<<29 | data&MaxMsgData)
}

// Op returns the operation in bits 31..29.
func (m Msg) Op() MsgOp { return MsgOp(uint32(m) >> 29) }

// Data returns the argument in bits 28..0.
func (m Msg) Data() uint32 { return uint32(m) & MaxMsgData }

func (m Msg) String() string {
	return m.Op().String() + "(" + strconv.FormatUint(uint64(m.Data()), 10) + ")"
}
