package ring

import (
	"encoding/binary"
	"errors"

	"github.com/rnet-dev/rnet/internal/wr"
)

// RecvIDFlag marks receive work request IDs, like rsocket's
// RS_WR_ID_FLAG_RECV, so one CQ can carry both kinds of completion.
const RecvIDFlag = 1 << 63

// hostBigEndian is whether this host's byte order is network order; it
// decides FlagNet in our private data and the order the peer uses for SGL
// updates it writes to us.
var hostBigEndian = binary.NativeEndian.Uint16([]byte{0, 1}) == 1

// sendKind says what a completed send gives back.
type sendKind uint8

const (
	sendData       sendKind = iota // a transfer: sbuf bytes and a data SQ entry
	sendDataMsg                    // iWARP message word of a transfer: a data SQ entry
	sendCtrl                       // credit update, SGL write or keepalive: a control slot
	sendShutdown                   // CTRL SHUTDOWN: a control slot
	sendDisconnect                 // CTRL DISCONNECT: a control slot
	sendExchange                   // a resumed queue pair's exchange: a data SQ entry (see takeover.go)
)

type sendRecord struct {
	kind  sendKind
	bytes uint32
}

// closeKind is a close message waiting for queued data to go out first.
type closeKind uint8

const (
	closeNone closeKind = iota
	closeShutdown
	closeDisconnect
)

// grant is a half of a receive ring advertised to the peer, from the
// moment it is advertised until every byte the peer wrote into it is read.
type grant struct {
	off    uint32 // start of the half in its ring
	size   uint32 // bytes granted
	filled uint32 // bytes the peer announced in it
	old    bool   // in the retired ring (rxOld), not the current one
}

// maxGrants bounds the grants alive at once: both halves of the current
// ring and of the retired one.
const maxGrants = 4

// resize is a move of one ring to a region of another size.
type resize struct {
	ring     int    // ring size wanted; 0: none
	grow     bool   // ring is larger than the current one
	region   Region // the region for it, once added
	has      bool
	declined bool // the driver could not make one: ask again after the next Quiet
}

// Engine is the state of one rsocket stream connection. See the package
// documentation for the contract with the driver. The zero value is not
// usable; call New.
type Engine struct {
	cfg    Config
	layout Layout
	send   Region // the current send region: sbuf, control slots, message words
	recv   Region // the first receive region (iWARP: the only one)
	target Region

	established bool
	err         error // first fatal error; sticky
	qpGone      bool  // QueuePairDestroyed: completions are ignored (see lost.go)

	// The peer, from its private data.
	peerCredits   uint16    // its rq_size
	peerGrows     bool      // its window may grow past peerCredits
	peerHeadroom  uint32    // receives it keeps posted beyond its credits (FlagRecvHeadroom)
	peerBigEndian bool      // write SGL updates to it big-endian
	peerTarget    RemoteSGE // its target SGL (2 entries)
	peerBuf       RemoteSGE // the first half of its rbuf
	peerHalf      uint32

	// ctrlSinceGrant counts the messages other than DATA sent since the
	// peer's last credit grant: rsocket grants a receive for each DATA
	// message but none for these, which take receives all the same.
	ctrlSinceGrant uint32

	// Send ring. Byte counters only grow; position = counter % len(sbuf).
	// tail <= posted <= head: [tail,posted) is in flight (or, with
	// RetainUntilReceived, kept until the peer has it), [posted,head)
	// written but not yet sent. sDone counts the bytes whose transfers
	// completed; tail is sDone, or with RetainUntilReceived the lower of
	// sDone and sReleased (see retain.go).
	sbuf        []byte
	sendCtrlOff int // control slots in the send region
	sendMsgOff  int // iWARP message words in the send region
	sTail       uint64
	sDone       uint64
	sPosted     uint64
	sHead       uint64
	// sLost counts the bytes of sends whose completions were lost with
	// the queue pair: neither completed nor in flight (see lost.go).
	sLost uint64
	// sReleased counts the bytes the peer's credit updates showed
	// consumed, and sentMsgs the lengths of the DATA messages sent and not
	// yet shown consumed, oldest first: RetainUntilReceived only.
	sReleased uint64
	sentMsgs  msgLengths
	// resume: the exchange that opens a resumed queue pair, and the
	// bytes received on the failed one that Read serves first (see
	// takeover.go).
	resume resumeState
	carry  []byte
	// sStart: the bytes at sPosted were written while nothing was unsent
	// or unacknowledged, and the writer was not held back (sBacklog), so
	// the transfer that starts them is cut to StartTransfer, but only at a
	// turn of the conversation (sTurn: a Read returned bytes since the
	// last Write, or nothing was written yet), when the peer likely waits
	// for what comes now. Within a one-way stream the cut would only cost a
	// transfer (docs/performance.md, "The first transfer").
	sStart bool
	sTurn  bool
	// sBacklog: the last Write could not take all its bytes (sbuf was
	// full), so the writer is in the middle of a stream.
	sBacklog bool
	// creditsHeld: HoldCredits stopped credit updates.
	creditsHeld bool
	// sendLent: LendSend handed out free space of sbuf, which the driver
	// fills without the engine; sbuf stays in its region until
	// CommitSend (see lend.go).
	sendLent bool
	// uncork: the driver asked that the next PostSends hold nothing back
	// (see cork.go).
	uncork bool

	// Send-side credits and the peer's buffer space.
	sseqNo       uint16       // DATA messages sent
	sseqComp     uint16       // sseqNo may not reach this
	tgt          [2]RemoteSGE // where our transfers may go; tgt[tgtIdx] is current
	tgtIdx       int
	mailboxNext  int // the entry of our target region the peer updates next
	sqAvail      int // send queue entries for data
	ctrlInFlight int
	ctrlSlotSeq  uint32 // picks the control slot for an SGL payload

	// Sends in flight, in posting order; completions must match.
	inflight     []sendRecord
	inflightHead int
	inflightLen  int
	sendSeq      uint64 // ID of the next send
	sendDoneSeq  uint64 // ID of the next send completion expected

	// Close and keepalive requests.
	closePending     closeKind
	writeClosed      bool
	readClosed       bool
	keepalivePending bool
	shutdownPosted   bool
	shutdownDone     bool
	disconnectPosted bool
	disconnectDone   bool
	peerShutdown     bool
	peerDisconnected bool

	// Receive ring: the current one (rbuf, in region rxReg) and perhaps a
	// retired one (rxOld) whose grants are still being filled or read.
	rxReg       Region
	rbuf        []byte
	half        uint32
	rbufAvail   uint32 // bytes of rbuf read back but not yet advertised (rbuf_bytes_avail)
	rbufFreeOff uint32 // the next half of rbuf to advertise
	rxOld       Region
	rxOldLive   bool
	// Grants alive, oldest first: the peer fills them in order, and Read
	// empties them in the same order. [gqHead, gqHead+gqFilled) are full;
	// the rest are the peer's to fill. readOff is how much of the oldest
	// Read has copied.
	gq        [maxGrants]grant
	gqHead    int
	gqLen     int
	gqFilled  int
	readOff   uint32
	remoteSGE int    // the peer's target SGL entry we write next
	unread    uint64 // bytes received, not yet read
	// cutShort says the last DATA message with bytes may be the first
	// part of a longer write (see MoreMayFollow).
	cutShort bool

	// Receive-side credits.
	window      uint16 // credits each update grants: RecvQueueSize, or less with SharedRecv
	creditWish  int    // receives CreditsWanted asks for (SharedRecv)
	rseqNo      uint16 // DATA messages fully consumed
	rseqComp    uint16 // a credit update is due when rseqNo reaches this
	grantedSeq  uint16 // the peer may send DATA until recvDataSeq reaches this
	recvDataSeq uint16 // DATA messages received

	// Received DATA messages not fully read: remaining length of each.
	msgs     []uint32
	msgHead  int
	msgCount int

	// Posted receives.
	recvDepth  int
	recvPosted uint64
	recvDone   uint64
	recvToPost int

	// Regions the rings move to (see regions.go).
	sendResize resize
	recvResize resize
	retired    [8]Region
	nRetired   int
	// Byte counters at the last Quiet, to tell whether anything moved.
	quietWritten  uint64
	quietReceived uint64

	stats Stats
}

// Stats counts what an engine did. All counters only grow; TakeOver adds
// the failed queue pair's engine's to the fresh one's.
type Stats struct {
	BytesWritten uint64 // accepted by Write
	// BytesSent counts the stream bytes posted in DATA transfers, each
	// once: bytes sent again after TakeOver count on the queue pair that
	// first carried them (it is the highest StreamCounts.Sent reached).
	BytesSent        uint64
	BytesReceived    uint64 // announced by DATA messages
	BytesRead        uint64 // copied out by Read
	MessagesSent     uint64 // DATA messages posted
	MessagesReceived uint64 // DATA messages received
	InlineSends      uint64 // DATA transfers sent inline
	CoalescedWrites  uint64 // Writes appended to unsent bytes of an earlier one

	CreditUpdatesSent     uint64 // SGL messages posted
	CreditUpdatesReceived uint64 // SGL messages received
	BufferGrantsSent      uint64 // rbuf halves advertised after the first
	BufferGrantsReceived  uint64 // target SGL entries taken from the peer
	KeepalivesSent        uint64
	// ConsumptionProbes counts empty DATA messages sent to draw a credit
	// update from a peer that has our retained bytes (see retain.go).
	ConsumptionProbes uint64

	// Stalls count PostSends calls that had data to send but had to stop.
	CreditStalls uint64 // no credits (sseq_no == sseq_comp)
	BufferStalls uint64 // the current target SGL entry is empty
	QueueStalls  uint64 // no send queue entry

	SendCompletions  uint64
	RecvCompletions  uint64
	ErrorCompletions uint64 // of these, how many carried an error status

	// Ring moves (see RegionWanted): to a larger region or a smaller one.
	SendRingGrowths uint64
	SendRingShrinks uint64
	RecvRingGrowths uint64
	RecvRingShrinks uint64
	RegionsDeclined uint64 // regions the driver could not provide
	// CreditWindowGrowths counts AddCredits calls that widened the
	// window (SharedRecv).
	CreditWindowGrowths uint64
}

// New builds an engine over caller-owned memory. The regions must be at
// least the sizes Layout reports for cfg; the engine zeroes the target
// region. cfg is normalised first.
func New(cfg Config, send, recv, target Region) (*Engine, error) {
	cfg = cfg.Normalize()
	l := cfg.Layout()
	if err := checkRegion("send", send, l.SendRegion); err != nil {
		return nil, err
	}
	if err := checkRegion("receive", recv, l.RecvRegion); err != nil {
		return nil, err
	}
	if err := checkRegion("target", target, l.TargetRegion); err != nil {
		return nil, err
	}
	clear(target.Buf[:l.TargetRegion])
	half := uint32(cfg.InitialRecvRing() / 2)
	e := &Engine{
		cfg:    cfg,
		layout: l,
		sTurn:  true, // the first Write starts the conversation
		send:   send,
		recv:   recv,
		target: target,

		sbuf:        send.Buf[:l.CtrlOffset],
		sendCtrlOff: l.CtrlOffset,
		sendMsgOff:  l.SendMsgOffset,

		mailboxNext: 1, // the peer advertises its second half first
		sqAvail:     cfg.SendQueueSize - CtrlSlots,
		inflight:    make([]sendRecord, cfg.SendQueueSize),

		rxReg: recv,
		rbuf:  recv.Buf[:2*half],
		half:  half,
		// The first half is granted in our private data; the second is
		// free and gets advertised by the first credit update.
		rbufAvail:   half,
		rbufFreeOff: half,
		gq:          [maxGrants]grant{{off: 0, size: half}},
		gqLen:       1,
		remoteSGE:   1,

		window:     uint16(cfg.FirstCredits()),
		rseqComp:   uint16(cfg.FirstCredits() / 2),
		grantedSeq: uint16(cfg.FirstCredits()),
		msgs:       make([]uint32, cfg.RecvQueueSize),

		recvDepth:  l.RecvDepth,
		recvToPost: cfg.FirstCredits() + RecvHeadroom,
	}
	return e, nil
}

func checkRegion(name string, r Region, need int) error {
	if len(r.Buf) < need {
		return errors.New("ring: " + name + " region is " + utoa(uint64(len(r.Buf))) +
			" bytes, layout needs " + utoa(uint64(need)))
	}
	if r.Addr+uint64(len(r.Buf)) < r.Addr {
		return errors.New("ring: " + name + " region address overflows")
	}
	return nil
}

// Config returns the normalised configuration.
func (e *Engine) Config() Config { return e.cfg }

// SetAutocork turns autocorking (Config.Autocork) on or off from now on;
// turned off, the next PostSends holds nothing back.
func (e *Engine) SetAutocork(on bool) {
	e.cfg.Autocork = on
	if !on {
		e.uncork = true
	}
}

// HoldCredits stops (true) or resumes (false) the credit updates that let
// the peer send more, as a peer whose receiver falls behind would: the
// peer goes on until the credits and buffer space it holds run out, then
// waits. For tests of the peer's stalls (package rnettest).
func (e *Engine) HoldCredits(hold bool) { e.creditsHeld = hold }

// Autocork reports whether autocorking is on.
func (e *Engine) Autocork() bool { return e.cfg.Autocork }

// Layout returns the layout of the engine's configuration.
func (e *Engine) Layout() Layout { return e.layout }

// LocalConnData returns the private data to send in the connect request or
// reply: credits = FirstCredits, the target region as target SGL, the first half
// of rbuf as data buffer, no iomap.
func (e *Engine) LocalConnData() [ConnDataSize]byte {
	flags := uint8(FlagIOMap)
	if RecvHeadroom >= FlaggedRecvHeadroom {
		flags |= FlagRecvHeadroom
	}
	if e.cfg.SharedRecv {
		flags |= FlagGrowingCredits
	}
	c := ConnData{
		Version: ConnDataVersion,
		Flags:   flags,
		Credits: uint16(e.cfg.FirstCredits()),
		TargetSGL: RemoteSGE{
			Addr:   e.target.Addr,
			Key:    e.target.RKey,
			Length: TargetSGLEntries,
		},
		DataBuf: RemoteSGE{Addr: e.recv.Addr, Key: e.recv.RKey, Length: e.half},
	}
	if hostBigEndian {
		c.Flags |= FlagNet
	}
	return c.Encode()
}

// Establish decodes and checks the peer's private data (the rs_conn_data
// part: strip an AF_IB ib_connect_hdr first) and enables sending. A
// *ProtocolError means the peer must be rejected. Call it before feeding
// receive completions to Complete.
func (e *Engine) Establish(peer []byte) error {
	if e.established {
		return ErrEstablished
	}
	c, err := DecodeConnData(peer)
	if err != nil {
		return err
	}
	switch {
	case c.Credits == 0:
		return protoErr(ErrBadConnData, 0, "zero credits")
	case c.TargetSGL.Length != TargetSGLEntries:
		return protoErr(ErrBadConnData, 0, "target SGL of "+utoa(uint64(c.TargetSGL.Length))+" entries")
	case c.TargetSGL.Addr+TargetSGLEntries*RemoteSGESize < c.TargetSGL.Addr:
		return protoErr(ErrBadConnData, 0, "target SGL address overflows")
	case c.DataBuf.Length == 0:
		return protoErr(ErrBadConnData, 0, "empty data buffer")
	case c.DataBuf.Addr+2*uint64(c.DataBuf.Length) < c.DataBuf.Addr:
		return protoErr(ErrBadConnData, 0, "data buffer address overflows")
	}
	if e.cfg.RetainUntilReceived && c.Flags&FlagGrowingCredits != 0 {
		return protoErr(ErrBadConnData, 0, "credit window that grows, which a sender retaining bytes until they are consumed cannot count")
	}
	e.peerCredits = c.Credits
	e.peerGrows = c.Flags&FlagGrowingCredits != 0
	if e.cfg.RetainUntilReceived {
		e.sentMsgs = msgLengths{limit: int(c.Credits)}
	}
	if c.Flags&FlagRecvHeadroom != 0 {
		e.peerHeadroom = FlaggedRecvHeadroom
	}
	e.peerBigEndian = c.Flags&FlagNet != 0
	e.peerTarget = c.TargetSGL
	e.peerBuf = c.DataBuf
	e.peerHalf = c.DataBuf.Length
	e.tgt[0] = c.DataBuf
	e.sseqComp = c.Credits
	e.established = true
	return nil
}

// Fail ends the connection with err, for failures the engine cannot see,
// such as a failed ibv_post_send. After Fail the driver should tear the
// connection down without waiting for Flushed.
func (e *Engine) Fail(err error) {
	if err == nil {
		err = errors.New("ring: connection failed")
	}
	e.fail(err)
}

func (e *Engine) fail(err error) error {
	if e.err == nil || isFlush(e.err) && !isFlush(err) {
		// A flush is never the cause: the QP went to the error state
		// because of a failed completion, which may be polled after it
		// (later in the batch), or because the connection manager saw
		// the peer go, which the driver reports after polling.
		e.err = err
	}
	return e.err
}

func isFlush(err error) bool {
	ce, ok := err.(*CompletionError)
	return ok && ce.Status == wr.WCWRFlushErr
}

// Err returns the error that ended the connection, or nil.
func (e *Engine) Err() error { return e.err }

// CreditWindow is how many messages each credit update lets the peer
// send ahead of our reading (it grows with SharedRecv).
func (e *Engine) CreditWindow() int { return int(e.window) }

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats { return e.stats }

// finished reports that no more messages will be exchanged.
func (e *Engine) finished() bool {
	return e.err != nil || e.peerDisconnected || e.disconnectDone ||
		(e.peerShutdown && e.shutdownDone)
}

// live reports whether completions still matter: before Establish and
// after the close handshake, failed completions are teardown flushes.
func (e *Engine) live() bool { return e.established && !e.finished() }

// Finished reports that the connection is over at the protocol level: a
// fatal error, the peer's DISCONNECT, the completion of our DISCONNECT, or
// SHUTDOWN both ways. The driver may disconnect once Flushed is also true.
func (e *Engine) Finished() bool { return e.finished() }

// Flushed reports that nothing is queued and nothing is in flight, so
// closing the queue pair loses nothing. Queued data that can never be sent
// (the connection finished) does not count. A control message counts until
// its completion: the peer has then received it, so a DISCONNECT reaches
// the peer before the connection manager's disconnect can overtake it.
func (e *Engine) Flushed() bool {
	if e.inflightLen != 0 || e.ctrlInFlight != 0 {
		return false
	}
	if e.finished() {
		return true
	}
	return e.sPosted == e.sHead && e.closePending == closeNone && !e.keepalivePending
}

// CreditsWanted is how many more receives a SharedRecv engine would like
// behind a larger credit window: the peer used up its whole window, so
// credits limit the stream. The driver claims what it can of the shared
// queue and calls AddCredits, also with 0 when it can give none.
func (e *Engine) CreditsWanted() int {
	if e.err != nil || e.finished() {
		return 0
	}
	return e.creditWish
}

// AddCredits widens the credit window by n of the receives CreditsWanted
// asked for (fewer are taken as given, more are ignored); they are posted
// before the next credit update grants them.
func (e *Engine) AddCredits(n int) {
	n = max(min(n, e.creditWish), 0)
	e.creditWish = 0
	if n == 0 {
		return
	}
	e.window += uint16(n)
	e.recvToPost += n
	e.stats.CreditWindowGrowths++
}

// InFlight is the number of sends posted whose completions have not come
// back yet. A driver that sees it stay above zero while no completion
// arrives knows the transport is retrying into the void.
func (e *Engine) InFlight() int { return e.inflightLen }

// PeerMayLackReceives reports whether sends in flight may be waiting for
// the peer to post receives rather than lost. A grant of credits says the
// peer had taken in all but rq_size of our DATA messages, and so had a
// receive back for each; the messages it does not count (credit updates,
// SHUTDOWN, DISCONNECT) take receives too, so once they outnumber the
// credits left and the receives the peer said it keeps beyond them
// (FlagRecvHeadroom), a send may find none. An rsocket peer keeps none
// beyond and puts receives back only when its application calls into the
// library, and the device retries such a send without limit
// (rnr_retry_count 7), as it must for a live peer busy elsewhere; a
// watchdog should not take that silence for a dead peer as soon.
func (e *Engine) PeerMayLackReceives() bool {
	return e.established && e.ctrlSinceGrant > uint32(uint16(e.sseqComp-e.sseqNo))+e.peerHeadroom
}

// Readable reports that Read would return something: data, io.EOF or an
// error.
func (e *Engine) Readable() bool {
	if e.resume.waiting() {
		return e.err != nil || e.readClosed // see Read
	}
	return e.unread > 0 || len(e.carry) > 0 || e.peerShutdown || e.peerDisconnected || e.err != nil || e.readClosed
}

// ReadableBytes is the number of received bytes not yet read: none on a
// resumed queue pair before TakeOver (see Read).
func (e *Engine) ReadableBytes() int {
	if e.resume.waiting() {
		return 0
	}
	return int(e.unread) + len(e.carry)
}

// SendSpace is the free space in sbuf: how much Write would take now.
// Once a larger region is there the ring takes nothing until it has moved
// (see regions.go).
func (e *Engine) SendSpace() int {
	if e.sendResize.has && e.sendResize.grow || e.resume.waiting() {
		return 0
	}
	return len(e.sbuf) - int(e.sHead-e.sTail)
}

// Writable reports that Write would not return (0, nil): there is at least
// SendLowWater bytes of space (or sbuf is empty), or Write would fail.
func (e *Engine) Writable() bool {
	if e.err != nil || e.writeClosed || e.peerDisconnected {
		return true
	}
	return e.SendSpace() >= min(SendLowWater, len(e.sbuf))
}

// PeerClosedWrite reports that the peer sent SHUTDOWN or DISCONNECT: once
// the received data is read, Read returns io.EOF. On a resumed queue pair
// it says so only from TakeOver on (see Read).
func (e *Engine) PeerClosedWrite() bool {
	return !e.resume.waiting() && (e.peerShutdown || e.peerDisconnected)
}

// PeerDisconnected reports that the peer sent DISCONNECT: writes fail with
// ErrPeerDisconnected.
func (e *Engine) PeerDisconnected() bool { return e.peerDisconnected }

// Credits returns how many DATA messages may be sent before the peer
// grants more.
func (e *Engine) Credits() int { return int(e.sseqComp - e.sseqNo) }
