package ring

// Protocol constants of rsocket (librdmacm/rsocket.c).
const (
	// StartTransfer caps the first transfer after the send side was idle
	// (RS_OLAP_START_SIZE): the peer's reader gets the first bytes early.
	// After it, transfers are as large as MaxTransfer and the target entry
	// allow. rsocket doubles from here within each send call, because it
	// copies and posts one transfer at a time; a Write here copies
	// everything before it posts, so doubling would only split each Write
	// into more transfers (docs/performance.md, "The first transfer"). The
	// receiver accepts any transfer size up to its target entry, so rsocket
	// peers are unaffected.
	StartTransfer = 2048
	// MaxTransfer caps one transfer (RS_MAX_TRANSFER).
	MaxTransfer = 65536
	// SendLowWater is how much sbuf space must be free before Writable
	// reports true (RS_SNDLOWAT), so a blocked writer is not woken per byte.
	SendLowWater = 2048
	// CtrlSlots is the number of send queue entries reserved for control
	// messages (RS_QP_CTRL_SIZE); at most this many are in flight.
	CtrlSlots = 4
	// CtrlSlotSize is the size of one control slot: room for one encoded
	// rs_sge, sent from here when the device cannot inline 16 bytes.
	CtrlSlotSize = RemoteSGESize
	// MsgWordSize is the size of an iWARP message word (RS_MSG_SIZE).
	MsgWordSize = 4
	// RecvHeadroom is how many receives are posted beyond RecvQueueSize, the
	// credits advertised. Credits bound only DATA messages; credit updates
	// and SHUTDOWN/DISCONNECT consume receives too. Between two polls of a
	// receiver, a sender that follows the protocol can send at most about
	// six credit updates (the receiver consumes at most one window of rq_size
	// messages and one rbuf of bytes, each update covers half of either) and
	// two close messages, so 16 spare receives keep two rnet engines free of
	// RNR with room to spare. C peers additionally rely on rnr_retry_count=7.
	RecvHeadroom = 16
)

// Defaults, as rsocket's built-in values (/etc/rdma/rsocket/* absent),
// except the send queue's: it is local, the largest part of a connection's
// kernel memory, and devices round a queue of n entries up to a power of
// two of n+1 and each entry to a power of two, so 255 entries of up to 48
// inline bytes fill a quarter of what rsocket's 384 of 64 take on rxe.
const (
	DefaultBufSize = 128 << 10
	// DefaultIdleBufSize is the size rings start at and shrink back to.
	DefaultIdleBufSize = 16 << 10
	// DefaultQueueSize is the receive queue's depth, the credit window.
	DefaultQueueSize       = 384
	DefaultSendQueueSize   = 255
	DefaultInlineThreshold = 48
)

// Limits applied by Normalize.
const (
	// MinBufSize is the smallest sbuf and rbuf. rsocket itself would accept
	// smaller buffers and stall; tiny buffers are useful to tests that want
	// wrap-around on every transfer.
	MinBufSize = 64
	// MaxBufSize keeps every offset and length in 32 bits with room to spare.
	MaxBufSize = 1 << 30
	// MinQueueSize and MaxQueueSize clamp SendQueueSize and RecvQueueSize like
	// rs_set_qp_size (RS_QP_MIN_SIZE, RS_QP_MAX_SIZE): credits and sequence
	// numbers are 16-bit, so a window must stay below 65535.
	MinQueueSize = 16
	MaxQueueSize = 0xFFFE
	// MaxInlineThreshold is the largest inline size the engine will use.
	MaxInlineThreshold = 0xFFFF
)

// NoInline as Config.InlineThreshold disables inline sends (rstream's
// bandwidth pass uses inline 0; a zero value means "default").
const NoInline = -1

// Config sizes one connection. The zero value means rsocket's defaults.
type Config struct {
	// SendBufferSize is the size of sbuf, where written bytes wait until their
	// transfer completes. 0 = 128 KiB. Clamped to [MinBufSize, MaxBufSize].
	SendBufferSize int
	// RecvBufferSize is the size of rbuf, advertised to the peer in two halves.
	// 0 = 128 KiB. Clamped to [MinBufSize, MaxBufSize] and rounded down to
	// an even number so both halves are equal.
	RecvBufferSize int
	// SendQueueSize is the send queue depth (max_send_wr): CtrlSlots entries are
	// kept for control messages, the rest carry data. 0 = 255. Clamped to
	// [MinQueueSize, MaxQueueSize].
	SendQueueSize int
	// RecvQueueSize is the credit window advertised to the peer: the number of DATA
	// messages it may have unread. RecvQueueSize+RecvHeadroom receives are posted.
	// 0 = 384. Clamped to [MinQueueSize, MaxQueueSize].
	RecvQueueSize int
	// InlineThreshold is the largest transfer sent inline; set it to the
	// max_inline_data the device granted. 0 = 48; NoInline = none. In
	// iWARP mode it is raised to at least MsgWordSize, like rsocket.
	InlineThreshold int
	// IdleBufferSize is the size both rings start at and shrink back to
	// once the connection goes quiet; SendBufferSize and RecvBufferSize
	// are then the most they grow to (see the package documentation,
	// "Rings that grow"). 0 = 16 KiB. Clamped to [MinBufSize, MaxBufSize]
	// and rounded down to an even number; a value at least a ring's
	// maximum keeps that ring fixed. The receive ring of an iWARP
	// connection is always fixed at RecvBufferSize.
	IdleBufferSize int
	// IWARP selects rsocket's message-send mode for devices without RDMA
	// WRITE WITH IMMEDIATE: each message becomes a plain RDMA WRITE plus a
	// 4-byte inline SEND carrying the message word in host byte order.
	IWARP bool
	// SharedRecv says the receives behind this connection's credits come
	// from a queue it shares with other connections (an SRQ): they carry
	// no buffer, and the peer's messages may consume any of them, so the
	// engine counts receive completions rather than matching their IDs.
	// The credit window then starts at FirstSharedCredits and grows as the
	// peer uses it up (see Engine.CreditsWanted), up to RecvQueueSize.
	// Normalize clears it in IWARP mode, whose messages each need a
	// receive buffer of the connection's own.
	SharedRecv bool
	// Autocork holds small writes back while a DATA transfer is in flight
	// and posts them together when it completes (see cork.go). Off, every
	// write is posted as soon as credits allow, as rsocket does.
	Autocork bool
	// RetainUntilReceived keeps each sent byte in sbuf until the peer's
	// credit updates show it received, not only until its transfer
	// completes, so that a connection resumed on another queue pair can
	// send it again (see retain.go). Off by default. Its cost: sbuf then
	// holds what the peer has not yet read as well as what is in flight,
	// so a stream needs a larger SendBufferSize to keep its rate
	// (docs/performance.md, "Keeping sent bytes until the peer has
	// them"); and Normalize clears SharedRecv, whose growing credit window
	// a retaining peer could not read as a count of messages consumed.
	RetainUntilReceived bool
}

// FirstSharedCredits is the credit window a SharedRecv connection starts
// with: an idle connection claims this many receives of the shared queue
// (plus RecvHeadroom), a busy one grows its window by doubling.
const FirstSharedCredits = 32

// FirstCredits is the credit window the connection advertises in its
// private data: RecvQueueSize, or FirstSharedCredits with SharedRecv.
func (c Config) FirstCredits() int {
	c = c.Normalize()
	if c.SharedRecv {
		return min(FirstSharedCredits, c.RecvQueueSize)
	}
	return c.RecvQueueSize
}

// Normalize returns c with defaults filled in and every field clamped to
// the limits above.
func (c Config) Normalize() Config {
	c.SendBufferSize = clampDefault(c.SendBufferSize, DefaultBufSize, MinBufSize, MaxBufSize)
	c.RecvBufferSize = clampDefault(c.RecvBufferSize, DefaultBufSize, MinBufSize, MaxBufSize) &^ 1
	c.IdleBufferSize = clampDefault(c.IdleBufferSize, DefaultIdleBufSize, MinBufSize, MaxBufSize) &^ 1
	c.SendQueueSize = clampDefault(c.SendQueueSize, DefaultSendQueueSize, MinQueueSize, MaxQueueSize)
	c.RecvQueueSize = clampDefault(c.RecvQueueSize, DefaultQueueSize, MinQueueSize, MaxQueueSize)
	switch {
	case c.InlineThreshold == 0:
		c.InlineThreshold = DefaultInlineThreshold
	case c.InlineThreshold < 0:
		// Stays NoInline, not 0, so that normalising twice cannot turn
		// "none" into the default.
		c.InlineThreshold = NoInline
	case c.InlineThreshold > MaxInlineThreshold:
		c.InlineThreshold = MaxInlineThreshold
	}
	if c.IWARP && c.InlineThreshold < MsgWordSize {
		c.InlineThreshold = MsgWordSize
	}
	if c.IWARP || c.RetainUntilReceived {
		c.SharedRecv = false
	}
	return c
}

// FitDevice returns a normalised c sized for a device whose queues take at
// most maxQueueWR work requests (0: no limit known) and whose transport is
// iWARP or not. Queue depths the device cannot give are lowered rather than
// failed, as rsocket does.
func (c Config) FitDevice(maxQueueWR int, iwarp bool) Config {
	c.IWARP = iwarp
	if maxQueueWR > 0 {
		c.SendQueueSize = max(min(c.SendQueueSize, maxQueueWR), MinQueueSize)
		c.RecvQueueSize = max(min(c.RecvQueueSize, maxQueueWR-RecvHeadroom), MinQueueSize)
	}
	if c.IWARP && c.InlineThreshold < MsgWordSize {
		c.InlineThreshold = MsgWordSize
	}
	return c
}

func clampDefault(v, def, lo, hi int) int {
	if v == 0 {
		return def
	}
	return min(max(v, lo), hi)
}

// InitialSendRing is the size the send ring starts at: IdleBufferSize, or
// SendBufferSize if that is smaller.
func (c Config) InitialSendRing() int {
	c = c.Normalize()
	return min(c.IdleBufferSize, c.SendBufferSize)
}

// InitialRecvRing is the size the receive ring starts at: IdleBufferSize,
// or RecvBufferSize if that is smaller or the transport is iWARP.
func (c Config) InitialRecvRing() int {
	c = c.Normalize()
	if c.IWARP {
		return c.RecvBufferSize
	}
	return min(c.IdleBufferSize, c.RecvBufferSize)
}

// Layout is what a driver allocates, registers and creates for one
// connection of a Config.
type Layout struct {
	// SendRegion is the size of the first send region: the initial send
	// ring, then CtrlSlots control slots, then (iWARP) SendQueueSize
	// message words. LOCAL_WRITE only. Later send regions (see
	// Engine.RegionWanted) have the same shape.
	SendRegion int
	// RecvRegion is the size of the first receive region: the initial
	// rbuf, then (iWARP) one message word per posted receive.
	// LOCAL_WRITE|REMOTE_WRITE.
	RecvRegion int
	// MaxSendRegion and MaxRecvRegion are the largest the two regions grow
	// to, with the rings at SendBufferSize and RecvBufferSize.
	MaxSendRegion int
	MaxRecvRegion int
	// TargetRegion is the size of the target SGL the peer writes SGL updates
	// into: 2 entries of 16 bytes (no iomap). LOCAL_WRITE|REMOTE_WRITE.
	TargetRegion int

	// Offsets inside the regions, for tests and diagnostics.
	CtrlOffset    int // control slots in the first send region
	SendMsgOffset int // iWARP message words in the first send region
	RecvMsgOffset int // iWARP message words in the receive region

	// Queue pair and CQ capabilities to request.
	SendDepth  int // max_send_wr
	RecvDepth  int // max_recv_wr: RecvQueueSize + RecvHeadroom
	CQDepth    int // SendDepth + RecvDepth (one CQ for both, like rsocket)
	MaxSendSGE int // 2: a transfer that wraps sbuf uses two SGEs
	MaxRecvSGE int // 1 (iWARP message word); 0 SGEs are used otherwise
}

// Layout returns the memory and queue sizes for c (normalised first).
func (c Config) Layout() Layout {
	c = c.Normalize()
	sendRing, recvRing := c.InitialSendRing(), c.InitialRecvRing()
	l := Layout{
		CtrlOffset:    sendRing,
		SendMsgOffset: sendRing + CtrlSlots*CtrlSlotSize,
		RecvMsgOffset: c.RecvBufferSize,
		SendDepth:     c.SendQueueSize,
		RecvDepth:     c.RecvQueueSize + RecvHeadroom,
		MaxSendSGE:    2,
		MaxRecvSGE:    1,
		TargetRegion:  TargetSGLEntries * RemoteSGESize,
	}
	l.SendRegion = c.sendRegionSize(sendRing)
	l.MaxSendRegion = c.sendRegionSize(c.SendBufferSize)
	l.RecvRegion = recvRing
	if c.IWARP {
		l.RecvRegion += l.RecvDepth * MsgWordSize
	}
	l.MaxRecvRegion = max(l.RecvRegion, c.RecvBufferSize)
	l.CQDepth = l.SendDepth + l.RecvDepth
	return l
}

// sendRegionSize is the size of a send region whose ring is ring bytes:
// the ring, the control slots and (iWARP) the message words.
func (c Config) sendRegionSize(ring int) int {
	n := ring + CtrlSlots*CtrlSlotSize
	if c.IWARP {
		n += c.SendQueueSize * MsgWordSize
	}
	return n
}
