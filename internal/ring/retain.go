package ring

import (
	"errors"
	"fmt"

	"github.com/rnet-dev/rnet/internal/wr"
)

// Keeping sent bytes until the peer has them (Config.RetainUntilReceived).
//
// A connection that resumes on another queue pair must send again every
// byte the peer had not received when the old one failed, so the sender
// keeps each byte in sbuf until the peer's credit updates show it
// consumed, not only until its transfer completes. The signal is the
// credit update itself: its message word carries rseq_no + rq_size, where
// rseq_no counts the DATA messages the peer's reader has consumed in full
// and rq_size is the window the peer advertised in its private data, which
// stays fixed (a peer whose window grows is refused at Establish). So
// every update says how many of our DATA messages the peer has consumed,
// and the lengths of those messages, kept in the order they were sent, say
// how many bytes. A completion would not do: it says the bytes left, and
// a receiver whose device fails loses the completions it had not polled.
//
// A byte leaves the ring once both its transfer has completed (no work
// request points at it any more) and the peer has shown it consumed.

// msgLengths is a FIFO of the byte counts of DATA messages sent and not yet
// shown consumed. Credits bound it: at most the peer's window of messages
// (limit) is ever unaccounted for. It grows as messages go unaccounted,
// so the window a peer advertises costs nothing until it is used.
type msgLengths struct {
	lens  []uint32
	head  int
	n     int
	limit int
}

func (q *msgLengths) push(n uint32) {
	if q.n == len(q.lens) {
		// Never past limit: unreachable while credits hold (sseqNo never
		// passes sseqComp).
		if len(q.lens) >= q.limit {
			return
		}
		grown := make([]uint32, min(max(2*len(q.lens), 16), q.limit))
		k := copy(grown, q.lens[q.head:])
		copy(grown[k:], q.lens[:q.head])
		q.lens, q.head = grown, 0
	}
	i := q.head + q.n
	if i >= len(q.lens) {
		i -= len(q.lens)
	}
	q.lens[i] = n
	q.n++
}

// pop removes the k oldest lengths and returns their sum.
func (q *msgLengths) pop(k int) uint64 {
	var sum uint64
	for ; k > 0; k-- {
		sum += uint64(q.lens[q.head])
		q.head++
		if q.head == len(q.lens) {
			q.head = 0
		}
		q.n--
	}
	return sum
}

// releaseConsumed applies the credit limit comp to the bytes kept: the
// messages it shows consumed since the previous limit leave the ring once
// their transfers have completed. recvCredits has already checked that
// comp moves forward and counts no message that was not sent.
func (e *Engine) releaseConsumed(comp uint16, m Msg) {
	k := int(comp - e.sseqComp)
	if k > e.sentMsgs.n {
		// Unreachable past recvCredits' checks: never pop what is not there.
		e.fail(protoErr(ErrBadCredits, m, fmt.Sprintf("limit %d shows %d messages consumed, %d unaccounted for", comp, k, e.sentMsgs.n)))
		return
	}
	e.sReleased += e.sentMsgs.pop(k)
	e.sTail = min(e.sDone, e.sReleased)
}

// copyRing copies the bytes at stream offsets [from, to) from one ring to
// another of another size: a byte lives at its offset modulo its ring's
// size. to-from fits both rings.
func copyRing(dst, src []byte, from, to uint64) {
	for from < to {
		s := src[from%uint64(len(src)):]
		d := dst[from%uint64(len(dst)):]
		n := min(uint64(len(s)), uint64(len(d)), to-from)
		copy(d[:n], s[:n])
		from += n
	}
}

// ErrNotRetaining is returned by Held for an engine without
// RetainUntilReceived: it let go of its bytes when their transfers
// completed, so it cannot send them again.
var ErrNotRetaining = errors.New("ring: sent bytes are not retained (Config.RetainUntilReceived is off)")

// StreamCounts are an engine's stream offsets, from the connection's first
// byte: what a resumed connection's exchange compares.
type StreamCounts struct {
	// Sent counts the bytes posted in DATA transfers, received or not.
	Sent uint64
	// Released counts the bytes the peer's credit updates have shown
	// consumed (RetainUntilReceived only; 0 otherwise). Released <= Sent;
	// every byte from Released on is still held.
	Released uint64
	// Written counts the bytes the application has written: the ring
	// holds [Released, Written).
	Written uint64
	// Received counts the peer's stream bytes that arrived here: DATA
	// messages whose receives completed, read by the application or not.
	Received uint64
	// ShutDown says SHUTDOWN was posted after the last byte; PeerShutDown
	// that the peer's SHUTDOWN arrived.
	ShutDown     bool
	PeerShutDown bool
}

// StreamCounts returns the engine's stream offsets. Once the queue pair
// has failed and every completion has been accounted (InFlight is 0), they
// are final for that queue pair.
func (e *Engine) StreamCounts() StreamCounts {
	c := StreamCounts{
		Sent:         e.sPosted,
		Written:      e.sHead,
		Received:     e.stats.BytesReceived,
		ShutDown:     e.shutdownPosted,
		PeerShutDown: e.peerShutdown,
	}
	if e.cfg.RetainUntilReceived {
		c.Released = e.sReleased
	}
	return c
}

// Held returns the bytes of the stream from offset from up to what the
// application has written, as the ring holds them: a and b, in order (b is
// empty unless they wrap around the ring). They stay valid until the next
// call that writes or moves the ring. from must lie within the bytes
// still held: from Released (or lower, down to the first byte whose
// transfer has not completed, which stays held too) to Written.
func (e *Engine) Held(from uint64) (a, b []byte, err error) {
	if !e.cfg.RetainUntilReceived {
		return nil, nil, ErrNotRetaining
	}
	if from < e.sTail || from > e.sHead {
		return nil, nil, fmt.Errorf("ring: stream offset %d is outside the bytes held, %d to %d", from, e.sTail, e.sHead)
	}
	size := uint64(len(e.sbuf))
	n := e.sHead - from
	pos := from % size
	first := min(n, size-pos)
	return e.sbuf[pos : pos+first], e.sbuf[:n-first], nil
}

// postProbes draws a credit update from the peer when the ring is full of
// bytes the peer may well have read but has not counted: a peer sends an
// update only once its reader has consumed half its window of messages or
// a granted half of its ring, and a sender whose ring is smaller than the
// peer's can fill it with bytes that complete neither. The writer would
// then wait for ever. So once every byte is sent and completed, the writer
// waits for room, and both of the peer's grants have room left (a grant
// used up is a half the peer frees, with an update, once it has read it),
// the sender sends as many empty DATA messages as bring the peer's count
// of consumed messages to the point where it owes an update (rseq_comp,
// half its window after its last update): an empty message counts as
// consumed when it arrives. They take credits like any DATA message; one
// burst per credit update. A writer that closed waits for no room, and no
// DATA may follow its SHUTDOWN.
func (e *Engine) postProbes(dst []wr.Send) []wr.Send {
	if e.writeClosed || e.sPosted != e.sHead || e.sDone != e.sPosted || e.sReleased == e.sPosted ||
		e.tgt[0].Length == 0 || e.tgt[1].Length == 0 ||
		!e.sBacklog && e.SendSpace() >= min(SendLowWater, len(e.sbuf)) {
		return dst
	}
	need := 1
	if e.cfg.IWARP {
		need = 2
	}
	// The peer owes an update once it has consumed up to its last
	// limit less the half of its window it keeps ahead.
	due := e.sseqComp - (e.peerCredits - e.peerCredits/2)
	for int16(due-e.sseqNo) > 0 && e.sseqNo != e.sseqComp && e.sqAvail >= need {
		t := e.tgt[e.tgtIdx]
		w := wr.Send{
			Op:         wr.OpWriteImm,
			Imm:        uint32(MakeMsg(MsgData, 0)),
			Inline:     true,
			Signaled:   true,
			RemoteAddr: t.Addr,
			RKey:       t.Key,
			ID:         e.pushSend(sendData, 0),
		}
		e.sseqNo++
		e.sqAvail -= need
		e.sentMsgs.push(0)
		e.stats.MessagesSent++
		e.stats.ConsumptionProbes++
		if !e.cfg.IWARP {
			dst = append(dst, w)
			continue
		}
		w.Op, w.Imm = wr.OpWrite, 0
		dst = append(dst, w, e.msgSend(sendDataMsg, uint32(MakeMsg(MsgData, 0))))
	}
	return dst
}

// StopRetaining turns RetainUntilReceived off on an engine not yet
// established: a dialer that offered to resume retains from the start,
// since its request states a fixed credit window, and stops when the
// listener declines, so that it can take a reply whose window grows and
// does not pay for retention on a connection that can never resume. The
// conn data it sent stays valid: a fixed window is what any peer may get.
func (e *Engine) StopRetaining() error {
	if e.established || e.sHead != 0 || e.resume.active {
		return errors.New("ring: StopRetaining on an engine already in use")
	}
	e.cfg.RetainUntilReceived = false
	return nil
}
