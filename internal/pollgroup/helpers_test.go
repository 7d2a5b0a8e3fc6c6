package pollgroup

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// numQP is a queue pair that only has a number: its member's steps poll
// with poll, if set.
type numQP struct {
	num  uint32
	poll func(out []wr.Completion, tries int) (int, error)
}

func (q *numQP) Num() uint32 { return q.num }

func (q *numQP) Step(_ *verbs.CQ, _ verbs.StepFlags, _ []wr.Recv, _ []wr.Send, out []wr.Completion, tries int) (int, error) {
	if len(out) == 0 || q.poll == nil {
		return 0, nil
	}
	return q.poll(out, tries)
}

// setHooks sets h for the test's duration.
func setHooks(t *testing.T, h *Hooks) {
	t.Cleanup(SetTestHooks(h))
}
