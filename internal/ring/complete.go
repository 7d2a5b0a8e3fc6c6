package ring

import "github.com/rnet-dev/rnet/internal/wr"

// Complete accounts a batch of completions from the connection's CQ, in the
// order polled, and returns the fatal error of the connection, if any.
// Completions keep being accounted after an error so Flushed stays
// accurate during teardown.
func (e *Engine) Complete(wcs []wr.Completion) error {
	if e.qpGone {
		return e.err // see QueuePairDestroyed
	}
	for i := range wcs {
		wc := &wcs[i]
		if wc.ID&RecvIDFlag != 0 {
			e.completeRecv(wc)
		} else {
			e.completeSend(wc)
		}
	}
	if e.sendResize.has && !e.sendLent && e.sendDrained() {
		e.moveSendRing()
	}
	return e.err
}

// Blocked reports that the engine holds work it could not post for want of a
// completion (a credit, a send queue entry, a control slot): written bytes,
// a resumed queue pair's exchange, a queued SHUTDOWN, DISCONNECT or
// keepalive, or a credit update that is due.
// Written bytes include corked ones (see Corked): the completion that
// releases them must be polled even if nobody reads or writes again.
// While it holds, the driver must keep polling the CQ even if nobody waits on
// the connection, or the peer may wait for ever.
func (e *Engine) Blocked() bool {
	if !e.established || e.finished() || e.disconnectPosted {
		return false
	}
	if e.sPosted != e.sHead || e.closePending != closeNone || e.keepalivePending || e.resume.sendOwn {
		return true
	}
	if e.peerShutdown || e.readClosed {
		return false
	}
	return e.creditsDue() || e.recvToPost >= repostBatch
}

// creditsDue reports that postCredits has an update to send once the
// consumed receives are back on the queue, leaving aside whether a control
// slot is free.
func (e *Engine) creditsDue() bool {
	if e.peerShutdown || e.readClosed {
		return false
	}
	return e.bufferGrantDue() || int16(e.rseqNo-e.rseqComp) >= 0
}

// repostBatch is how many consumed receives may wait for the driver's next
// crossing before they must go back on the queue by themselves (see
// RepostDue): a quarter of RecvHeadroom, so that the rest still absorbs the
// control messages a peer can send between two polls (about eight, see
// RecvHeadroom) with room to spare.
const repostBatch = RecvHeadroom / 4

// RepostDue reports that receives consumed so far must be posted again now,
// in a crossing of their own if need be, rather than with whatever the
// driver posts or polls next. A receive that a DATA message used is covered
// by no credit until a credit update grants it again, and postCredits
// grants nothing while receives wait, so only the peer's control messages
// (credit updates, SHUTDOWN, DISCONNECT, keepalives) need the receives back
// soon; they have RecvHeadroom spare ones. So receives wait until
// repostBatch of them have been consumed or a credit update is due. A
// driver that reposts only then saves a crossing per message it receives:
// the receive goes back with the next poll or Write.
func (e *Engine) RepostDue() bool {
	if e.recvToPost == 0 {
		return false
	}
	return !e.established || e.recvToPost >= repostBatch || e.creditsDue() ||
		e.peerShutdown || e.readClosed
}
