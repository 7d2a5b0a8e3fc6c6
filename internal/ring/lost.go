package ring

import (
	"errors"
	"fmt"

	"github.com/rnet-dev/rnet/internal/wr"
)

// Completions lost with a queue pair.
//
// A device that goes away (rdma link delete, a hot unplug, a driver
// reset) takes with it the completions its owner had not polled yet: of
// work it finished, nothing more is heard. What the queue pair had not
// finished still completes, flushed, with IDs past the lost ones; for
// what it finished last nothing comes at all. So a failed completion whose
// ID lies ahead of the one expected, within what is outstanding, shows the
// ones between lost, and once the driver has destroyed the queue pair,
// QueuePairDestroyed drops whatever is still outstanding. Either way what
// was lost counts as not done: a send's bytes are not counted completed
// (with RetainUntilReceived they stay held, and the peer's count, never
// below what its credit updates released, says what goes again), and a
// receive's message as not received (the peer counts it so, and sends it
// again).

// ErrCompletionsLost: the queue pair's completions were lost, as when its
// device is removed; not the peer's fault.
var ErrCompletionsLost = errors.New("work completions lost (was the device removed?)")

// QueuePairDestroyed tells the engine that the driver destroyed its queue
// pair: no completion will come for the work still outstanding. Its sends
// are dropped as lost (see above), and so are its receives unless they
// are a shared queue's, so that InFlight is 0 and StreamCounts are final.
// If anything was outstanding on a connection that was not over, the
// engine fails with ErrCompletionsLost, unless it had failed otherwise
// already. Complete ignores every completion from then on.
func (e *Engine) QueuePairDestroyed() {
	if e.qpGone {
		return
	}
	e.qpGone = true
	sends := e.inflightLen
	e.dropSends(sends)
	var recvs uint64
	if !e.cfg.SharedRecv {
		recvs = e.recvPosted - e.recvDone
		e.recvDone = e.recvPosted
	}
	if (sends > 0 || recvs > 0) && (e.live() || isFlush(e.err)) {
		e.fail(fmt.Errorf("ring: %w: the queue pair was destroyed with %d sends and %d receives outstanding",
			ErrCompletionsLost, sends, recvs))
	}
}

// loseSends takes a failed send completion whose ID lies ahead of the one
// expected, within the sends in flight, as the loss of those before it.
func (e *Engine) loseSends(wc *wr.Completion) {
	lost := int(wc.ID - e.sendDoneSeq)
	if e.live() || isFlush(e.err) {
		e.fail(lostErr("send", lost, wc.ID, &CompletionError{ID: wc.ID, Status: wc.Status, VendorErr: wc.VendorErr}))
	}
	e.dropSends(lost)
}

// loseRecvs is loseSends for the receive with sequence number seq.
func (e *Engine) loseRecvs(seq uint64, wc *wr.Completion) {
	lost := int(seq - e.recvDone)
	if e.live() || isFlush(e.err) {
		e.fail(lostErr("receive", lost, seq, &CompletionError{ID: wc.ID, Status: wc.Status, VendorErr: wc.VendorErr, Recv: true}))
	}
	e.recvDone = seq
}

func lostErr(kind string, lost int, id uint64, cause *CompletionError) error {
	return fmt.Errorf("ring: %w: %d %s completions before %s ID %d, which came back with: %w",
		ErrCompletionsLost, lost, kind, kind, id, cause)
}

// dropSends drops the k oldest sends in flight without counting them
// done: their queue entries and control slots come back, and a transfer's
// bytes count as lost, not completed.
func (e *Engine) dropSends(k int) {
	for ; k > 0; k-- {
		rec := e.inflight[e.inflightHead]
		e.inflightHead = (e.inflightHead + 1) % len(e.inflight)
		e.inflightLen--
		e.sendDoneSeq++
		switch rec.kind {
		case sendData:
			e.sLost += uint64(rec.bytes)
			e.sqAvail++
		case sendDataMsg, sendExchange:
			e.sqAvail++
		default:
			e.ctrlInFlight--
		}
	}
}
