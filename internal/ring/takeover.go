package ring

import (
	"errors"
	"fmt"

	"github.com/rnet-dev/rnet/internal/wr"
)

// Taking a connection over on a fresh queue pair.
//
// When a connection's queue pair fails, the driver makes a fresh engine
// for the new queue pair, with regions of its own (the new queue pair may
// be on another device), and the two engines hand the stream over:
//
//  1. BeginResume, before Establish: the fresh engine's first DATA message
//     will be this side's exchange, and it takes the peer's first DATA
//     message as the peer's exchange, which it neither counts nor
//     delivers. Until TakeOver it accepts no Write, hands no byte to Read
//     and sends no close message.
//  2. Establish and the driver loop as for any connection, until
//     PeerExchange has the peer's exchange and ResumeReady says this
//     side's has gone out.
//  3. The driver checks the peer's count against the old engine (package
//     resume: HeldBy, Held.Resend) and calls TakeOver: the fresh engine
//     copies the old one's held bytes from the peer's count on, and the
//     bytes it received and nobody read yet, and goes on from there.
//
// The old engine is not used afterwards; its regions go as at any close.

// ExchangeSize is the size of the exchange message that opens a resumed
// queue pair (package resume gives its layout).
const ExchangeSize = 16

// resumeState tracks the exchange on a resumed queue pair.
type resumeState struct {
	active    bool // BeginResume was called and TakeOver not yet
	sendOwn   bool // this side's exchange is still to post
	ownDone   bool // its send completed: the bytes it was sent from are free
	awaitPeer bool // the peer's exchange has not arrived yet
	own       [ExchangeSize]byte
	peer      [ExchangeSize]byte
}

// waiting reports that the stream may not move yet: before TakeOver no
// byte is written or read, and no SHUTDOWN or DISCONNECT goes out.
func (r *resumeState) waiting() bool { return r.active }

// ErrResumeNotReady is returned by TakeOver before both exchanges have
// gone their way.
var ErrResumeNotReady = errors.New("ring: the resumed queue pair's exchange is not complete")

// BeginResume makes this fresh engine the start of a resumed queue pair:
// own is this side's exchange message, sent as the first DATA message.
// Call it before Establish, on an engine with RetainUntilReceived.
func (e *Engine) BeginResume(own [ExchangeSize]byte) error {
	switch {
	case !e.cfg.RetainUntilReceived:
		return ErrNotRetaining
	case e.established || e.sHead != 0 || e.resume.active:
		return errors.New("ring: BeginResume on an engine already in use")
	}
	e.resume = resumeState{active: true, sendOwn: true, awaitPeer: true, own: own}
	return nil
}

// PeerExchange returns the peer's exchange message once it has arrived.
func (e *Engine) PeerExchange() (msg [ExchangeSize]byte, ok bool) {
	if !e.resume.active || e.resume.awaitPeer {
		return msg, false
	}
	return e.resume.peer, true
}

// ResumeReady reports that TakeOver may be called: the peer's exchange
// arrived and this side's completed.
func (e *Engine) ResumeReady() bool {
	return e.resume.active && !e.resume.awaitPeer && e.resume.ownDone
}

// ExchangeAwaitsPeer reports that this side's exchange has been sent and
// acknowledged and the peer's has not arrived.
func (e *Engine) ExchangeAwaitsPeer() bool {
	return e.resume.active && e.resume.ownDone && e.resume.awaitPeer
}

// ResumeProgress says, on a resumed queue pair before TakeOver, where the
// exchange stands, for an error that says what a resume that ran out of
// time was waiting for.
func (e *Engine) ResumeProgress() string {
	r := &e.resume
	switch {
	case !r.active:
		return "no exchange under way"
	case r.sendOwn && !r.awaitPeer:
		return "ours not yet sent (" + e.postStall() + "); the peer's arrived"
	case r.sendOwn:
		return "ours not yet sent (" + e.postStall() + "); the peer's not arrived"
	case !r.ownDone && r.awaitPeer:
		return "ours sent, its send not completed; the peer's not arrived"
	case !r.ownDone:
		return "ours sent, its send not completed; the peer's arrived"
	case r.awaitPeer:
		return "ours sent; the peer's not arrived"
	}
	return "both done"
}

// postStall says why a post may wait: no send queue entry, or no credit.
func (e *Engine) postStall() string {
	switch {
	case e.sqAvail < 1:
		return "the send queue is full"
	case e.sseqNo == e.sseqComp:
		return "no credit from the peer"
	}
	return "not yet stepped"
}

// postExchange posts this side's exchange as the first DATA message, from
// the start of the empty send ring, which stays untouched until its send
// completes (TakeOver waits for that).
func (e *Engine) postExchange(dst []wr.Send) []wr.Send {
	need := 1
	if e.cfg.IWARP {
		need = 2
	}
	t := &e.tgt[e.tgtIdx]
	switch {
	case e.sqAvail < need:
		e.stats.QueueStalls++
		return dst
	case e.sseqNo == e.sseqComp:
		e.stats.CreditStalls++
		return dst
	case t.Length < ExchangeSize:
		// The first grant of any peer is far larger; a peer that grants
		// less than the exchange cannot take it.
		e.fail(protoErr(ErrBadConnData, 0, fmt.Sprintf("a grant of %d bytes cannot take the %d-byte exchange", t.Length, ExchangeSize)))
		return dst
	}
	copy(e.sbuf, e.resume.own[:])
	w := wr.Send{
		Op:         wr.OpWriteImm,
		Imm:        uint32(MakeMsg(MsgData, ExchangeSize)),
		Inline:     ExchangeSize <= e.cfg.InlineThreshold,
		Signaled:   true,
		RemoteAddr: t.Addr,
		RKey:       t.Key,
		NumSGE:     1,
		SGE:        [2]wr.SGE{{Addr: e.send.Addr, Length: ExchangeSize, LKey: e.send.LKey}},
	}
	e.useTarget(t, ExchangeSize, need)
	e.sentMsgs.push(0) // a message, but no byte of the stream
	e.resume.sendOwn = false
	w.ID = e.pushSend(sendExchange, 0)
	if !e.cfg.IWARP {
		return append(dst, w)
	}
	msg := w.Imm
	w.Op, w.Imm = wr.OpWrite, 0
	return append(dst, w, e.msgSend(sendDataMsg, msg))
}

// takePeerExchange takes the peer's exchange, the first DATA message on a
// resumed queue pair (recvData checked its size), out of the stream: it is
// consumed at once, and neither counted nor delivered.
func (e *Engine) takePeerExchange() {
	e.resume.awaitPeer = false
	e.take(e.resume.peer[:], ExchangeSize) // nothing is carried before TakeOver
	e.stats.BytesReceived -= ExchangeSize
	e.stats.BytesRead -= ExchangeSize
}

// TakeOver makes this fresh engine carry on the stream of old, whose
// queue pair failed: from is the count of bytes the peer says it has (its
// exchange, checked with package resume), resendShutdown that old's
// SHUTDOWN must go again. The bytes old holds from there on, and those it
// received and nobody read yet, move here; the send ring must hold the
// first (make the fresh engine with IdleBufferSize at least old's send
// ring). Call it once ResumeReady, and once old has no send in flight
// (every completion polled, or QueuePairDestroyed).
//
// The peer may have taken over first: what it sent again, SHUTDOWN
// included, may already be here, waiting behind old's unread bytes
// (until TakeOver, Read and RecvSpan hand out nothing). Stats carry on
// from old's (see Stats.BytesSent for the bytes sent again).
func (e *Engine) TakeOver(old *Engine, from uint64, resendShutdown bool) error {
	switch {
	case !old.cfg.RetainUntilReceived:
		return ErrNotRetaining
	case !e.ResumeReady():
		return ErrResumeNotReady
	case e.err != nil:
		return fmt.Errorf("ring: the resumed queue pair failed: %w", e.err)
	case old.inflightLen != 0:
		return fmt.Errorf("ring: the old queue pair still has %d sends in flight", old.inflightLen)
	case old.disconnectPosted || old.peerDisconnected:
		return errors.New("ring: a connection that sent or received DISCONNECT does not resume")
	case from < old.sTail || from > old.sPosted:
		return fmt.Errorf("ring: stream offset %d is outside the bytes held, %d to %d", from, old.sTail, old.sPosted)
	case old.sHead-from > uint64(len(e.sbuf)):
		return fmt.Errorf("ring: %d bytes to send again, the fresh send ring holds %d (raise Config.IdleBufferSize)",
			old.sHead-from, len(e.sbuf))
	}
	e.resume.active = false

	copyRing(e.sbuf, old.sbuf, from, old.sHead)
	// The peer has every byte before from: nothing before it is held.
	e.sTail, e.sDone, e.sPosted, e.sReleased, e.sHead = from, from, from, from, old.sHead
	e.sTurn, e.sBacklog = old.sTurn, old.sBacklog

	// The application may have closed either engine meanwhile.
	e.writeClosed = e.writeClosed || old.writeClosed
	e.readClosed = e.readClosed || old.readClosed
	oldStats := old.stats // before take counts the carried bytes as read
	if n := int(old.unread) + len(old.carry); n > 0 && !e.readClosed {
		e.carry = make([]byte, n)
		old.take(e.carry, n)
	}
	e.stats.add(oldStats)

	e.closePending = max(e.closePending, old.closePending)
	if old.shutdownPosted {
		if resendShutdown {
			e.closePending = max(e.closePending, closeShutdown)
		} else {
			e.shutdownPosted, e.shutdownDone = true, true
			if e.closePending == closeShutdown {
				e.closePending = closeNone // a second CloseWrite
			}
		}
	}
	// A SHUTDOWN the peer sent again may have arrived here already.
	e.peerShutdown = e.peerShutdown || old.peerShutdown
	return nil
}

// add adds o's counters to s: a resumed connection's counters carry on
// from its old engine's.
func (s *Stats) add(o Stats) {
	s.BytesWritten += o.BytesWritten
	s.BytesSent += o.BytesSent
	s.BytesReceived += o.BytesReceived
	s.BytesRead += o.BytesRead
	s.MessagesSent += o.MessagesSent
	s.MessagesReceived += o.MessagesReceived
	s.InlineSends += o.InlineSends
	s.CoalescedWrites += o.CoalescedWrites
	s.CreditUpdatesSent += o.CreditUpdatesSent
	s.CreditUpdatesReceived += o.CreditUpdatesReceived
	s.BufferGrantsSent += o.BufferGrantsSent
	s.BufferGrantsReceived += o.BufferGrantsReceived
	s.KeepalivesSent += o.KeepalivesSent
	s.ConsumptionProbes += o.ConsumptionProbes
	s.CreditStalls += o.CreditStalls
	s.BufferStalls += o.BufferStalls
	s.QueueStalls += o.QueueStalls
	s.SendCompletions += o.SendCompletions
	s.RecvCompletions += o.RecvCompletions
	s.ErrorCompletions += o.ErrorCompletions
	s.SendRingGrowths += o.SendRingGrowths
	s.SendRingShrinks += o.SendRingShrinks
	s.RecvRingGrowths += o.RecvRingGrowths
	s.RecvRingShrinks += o.RecvRingShrinks
	s.RegionsDeclined += o.RegionsDeclined
	s.CreditWindowGrowths += o.CreditWindowGrowths
}
