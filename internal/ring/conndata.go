package ring

import (
	"encoding/binary"
	"strconv"
)

// ConnDataSize is the size of rs_conn_data, the private data rsocket puts in
// both the connect request and the reply. With AF_IB addressing a 36-byte
// ib_connect_hdr precedes it; the caller strips that before decoding.
const ConnDataSize = 40

// ConnData version and flags. rsocket looks at no flag but FlagNet and
// FlagIOMap, and sets no other; the rest are rnet's own.
const (
	ConnDataVersion = 1
	FlagNet         = 1 << 0 // the sender is big-endian: SGL updates to it are written big-endian
	FlagIOMap       = 1 << 1 // an iomap table follows the target SGL (rsocket always sets it)
	// FlagRecvHeadroom is rnet's own: the sender keeps at least
	// FlaggedRecvHeadroom receives posted beyond the credits it grants,
	// so that up to that many messages beyond the credits left, of the
	// kinds credits do not count (credit updates, SHUTDOWN, DISCONNECT),
	// find a receive. An rsocket peer posts exactly its credits.
	FlagRecvHeadroom = 1 << 6
	// FlagGrowingCredits is rnet's own: the sender's credit window may
	// grow past the credits it advertises (see Config.SharedRecv).
	FlagGrowingCredits = 1 << 7
)

// FlaggedRecvHeadroom is how many receives beyond its credits a sender of
// FlagRecvHeadroom keeps posted. It is part of the flag's meaning on the
// wire, so it stays 16 whatever RecvHeadroom becomes; an engine with less
// headroom does not set the flag.
const FlaggedRecvHeadroom = 16

// TargetSGLEntries is the number of rs_sge entries in a target SGL
// (RS_SGL_SIZE). The two halves of rbuf are advertised alternately into them.
const TargetSGLEntries = 2

// RemoteSGESize is the encoded size of an rs_sge {addr u64, key u32, length u32}.
const RemoteSGESize = 16

// RemoteSGE is rsocket's rs_sge: a piece of the peer's memory it may write.
type RemoteSGE struct {
	Addr   uint64
	Key    uint32
	Length uint32
}

// ConnData is the decoded rs_conn_data. Multi-byte fields are big-endian on
// the wire whatever the hosts are.
type ConnData struct {
	Version uint8
	Flags   uint8
	// Credits is the sender's receive queue size: how many DATA messages the
	// receiver may send before the first credit update.
	Credits uint16
	// PortMTU is rnet's own, in the first of rsocket's three reserved
	// bytes (offset 4): the IB MTU code (enum ibv_mtu, 1 = 256 bytes to
	// 5 = 4096) of the sender's port's active MTU, the largest packet it
	// takes, so that the dialler, which learns it from the reply, can
	// limit its path MTU to it. 0 = not said: C rsocket writes zeros
	// there and ignores the byte. Offsets 5 and 6 stay zero.
	PortMTU uint8
	// TargetIOMapSize is the scale code of the iomap size (see
	// IOMapScaleToValue); 0 = no iomap.
	TargetIOMapSize uint8
	// TargetSGL is where the peer writes SGL updates (Length counts entries).
	TargetSGL RemoteSGE
	// DataBuf is the first half of the sender's rbuf.
	DataBuf RemoteSGE
}

// Encode lays c out as the 40 wire bytes. Reserved bytes are zero.
func (c *ConnData) Encode() [ConnDataSize]byte {
	var b [ConnDataSize]byte
	b[0] = c.Version
	b[1] = c.Flags
	binary.BigEndian.PutUint16(b[2:], c.Credits)
	b[portMTUOffset] = c.PortMTU
	// b[5:7] reserved, zero.
	b[7] = c.TargetIOMapSize
	putRemoteSGE(b[8:], c.TargetSGL, binary.BigEndian)
	putRemoteSGE(b[24:], c.DataBuf, binary.BigEndian)
	return b
}

// DecodeConnData parses private data. It accepts more than ConnDataSize
// bytes because the CM pads private data (to 56 bytes on InfiniBand) and
// rejects shorter data and versions other than 1 with a *ProtocolError.
// It does not judge the field values; Engine.Establish does.
func DecodeConnData(b []byte) (ConnData, error) {
	if len(b) < ConnDataSize {
		return ConnData{}, protoErr(ErrShortConnData, 0, strconv.Itoa(len(b))+" bytes")
	}
	c := ConnData{
		Version:         b[0],
		Flags:           b[1],
		Credits:         binary.BigEndian.Uint16(b[2:]),
		PortMTU:         b[portMTUOffset],
		TargetIOMapSize: b[7],
		TargetSGL:       getRemoteSGE(b[8:], binary.BigEndian),
		DataBuf:         getRemoteSGE(b[24:], binary.BigEndian),
	}
	if c.Version != ConnDataVersion {
		return c, protoErr(ErrVersion, 0, "version "+strconv.Itoa(int(c.Version)))
	}
	return c, nil
}

// portMTUOffset is where ConnData.PortMTU travels.
const portMTUOffset = 4

// MaxPortMTUCode is the largest IB MTU code (4096 bytes).
const MaxPortMTUCode = 5

// PortMTUBytes is the sender's port MTU in bytes, or 0 when it did not say.
// The peer is not trusted to send a valid code: any code outside 1 to 5
// counts as not said, as zero from C rsocket does, so that a later use of
// the byte never fails a connection; a valid code only ever lowers the
// receiver's path MTU, so a peer that lies harms its own connection alone.
func (c *ConnData) PortMTUBytes() int {
	if c.PortMTU < 1 || c.PortMTU > MaxPortMTUCode {
		return 0
	}
	return 128 << c.PortMTU
}

// PortMTUCode is the IB MTU code for a port MTU of bytes: the largest of
// 256, 512, 1024, 2048 and 4096 that is at most bytes, or 0 (not said) for
// less than 256.
func PortMTUCode(bytes int) uint8 {
	for code := uint8(MaxPortMTUCode); code >= 1; code-- {
		if 128<<code <= bytes {
			return code
		}
	}
	return 0
}

// SetPortMTU writes a port MTU of bytes (see ConnData.PortMTU) into
// private data made by Engine.LocalConnData.
func SetPortMTU(b *[ConnDataSize]byte, bytes int) {
	b[portMTUOffset] = PortMTUCode(bytes)
}

// IOMapValueToScale encodes an iomap entry count as rsocket's 8-bit scale
// code: values up to 128 are literal, larger ones 0x80 | (v >> 8).
func IOMapValueToScale(v int) uint8 {
	if v <= 1<<7 {
		return uint8(v)
	}
	return uint8(1<<7 | (v>>8)&0x7f)
}

// IOMapScaleToValue decodes rsocket's iomap scale code.
func IOMapScaleToValue(s uint8) int {
	if s <= 1<<7 {
		return int(s)
	}
	return int(s&^(1<<7)) << 8
}

func putRemoteSGE(b []byte, s RemoteSGE, order binary.ByteOrder) {
	order.PutUint64(b[0:], s.Addr)
	order.PutUint32(b[8:], s.Key)
	order.PutUint32(b[12:], s.Length)
}

func getRemoteSGE(b []byte, order binary.ByteOrder) RemoteSGE {
	return RemoteSGE{
		Addr:   order.Uint64(b[0:]),
		Key:    order.Uint32(b[8:]),
		Length: order.Uint32(b[12:]),
	}
}
