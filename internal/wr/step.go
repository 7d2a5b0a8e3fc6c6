package wr

// StepFlags choose what a queue pair's Step does before it posts and polls:
// the connection driver asks for them and the device binding carries them
// out, so both take them from here.
type StepFlags uint32

const (
	// StepTakeEvent first takes the event (if any) that woke a wait on
	// the CQ's completion channel, and acknowledges it. The CQ must be the
	// only one on its channel, since the event's CQ is not checked.
	// Finding no event is no failure: the wakeup was a deadline's, or
	// spurious.
	StepTakeEvent StepFlags = 2
	// StepArm arms the CQ (ReqNotify for every completion) before the
	// poll, so that a completion landing after the poll still leaves an
	// event. After StepTakeEvent|StepArm the CQ stays armed: every
	// completion not yet polled has left an event, and the caller may wait
	// at once.
	StepArm StepFlags = 1
	// StepArmSend arms the CQ that send completions go to, when a queue
	// pair's sends and receives complete into CQs of their own (a poll
	// group's split CQ); otherwise it arms the one CQ, as StepArm. A
	// waiter that needs no send completion leaves it unarmed, so that
	// the completion of a send it made does not wake it.
	StepArmSend StepFlags = 4
)
