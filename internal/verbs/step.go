package verbs

// StepFlags choose what a Step does before it posts and polls.
type StepFlags uint32

const (
	// StepTakeEvent first takes the event (if any) that woke a wait on
	// cq's completion channel, and acknowledges it. cq must be the only CQ
	// on its channel, since the event's CQ is not checked. Finding no
	// event is no failure: the wakeup was a deadline's, or spurious.
	StepTakeEvent StepFlags = 2
	// StepArm arms cq (ReqNotify for every completion) before the poll, so
	// that a completion landing after the poll still leaves an event.
	// After StepTakeEvent|StepArm the CQ stays armed: every completion not
	// yet polled has left an event, and the caller may wait at once.
	StepArm StepFlags = 1
)

// stepPlan says how many receives and sends a Step posts ahead of its
// crossing, which takes at most MaxBatch of each: the sends ahead come
// after every receive, so when sends overflow, all receives go ahead.
func stepPlan(nRecv, nSend int) (aheadRecvs, aheadSends int) {
	if nSend > MaxBatch {
		return nRecv, nSend - MaxBatch
	}
	return max(nRecv-MaxBatch, 0), 0
}
