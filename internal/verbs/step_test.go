package verbs

import "testing"

// TestStepPlanPostsEveryRecvFirst: whatever the counts, the receives a Step
// posts ahead of its crossing and in it all precede any send, since a send
// may carry the credits that those receives back.
func TestStepPlanPostsEveryRecvFirst(t *testing.T) {
	for _, c := range []struct{ recvs, sends int }{
		{0, 0}, {1, 1}, {32, 32}, {33, 0}, {0, 33}, {64, 64}, {64, 1}, {1, 64}, {200, 100},
	} {
		aheadRecvs, aheadSends := stepPlan(c.recvs, c.sends)
		inCrossingRecvs, inCrossingSends := c.recvs-aheadRecvs, c.sends-aheadSends
		if inCrossingRecvs > MaxBatch || inCrossingSends > MaxBatch || inCrossingRecvs < 0 || inCrossingSends < 0 {
			t.Errorf("%d recvs, %d sends: the crossing takes %d and %d, more than %d or fewer than 0",
				c.recvs, c.sends, inCrossingRecvs, inCrossingSends, MaxBatch)
		}
		// Order of posting: recvs ahead, sends ahead, then in the
		// crossing recvs, then sends. A send ahead precedes the
		// crossing's recvs, so there must be none of those then.
		if aheadSends > 0 && inCrossingRecvs > 0 {
			t.Errorf("%d recvs, %d sends: %d sends are posted before the last %d recvs",
				c.recvs, c.sends, aheadSends, inCrossingRecvs)
		}
	}
}
