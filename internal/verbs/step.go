package verbs

import "github.com/rnet-dev/rnet/internal/wr"

// StepFlags choose what a Step does before it posts and polls; they are
// the shared vocabulary's (see wr.StepFlags).
type StepFlags = wr.StepFlags

const (
	StepTakeEvent = wr.StepTakeEvent
	StepArm       = wr.StepArm
	StepArmSend   = wr.StepArmSend
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
