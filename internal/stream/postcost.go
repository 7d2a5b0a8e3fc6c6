package stream

import (
	"time"
)

// The clock of posts, for autocorking (autocork.go): when a crossing last
// posted sends, and how long posts take on a device in software.

// maxCorkWindow bounds the cork window on a device in software (see
// corkWindow), and each post's share of it: a stall of the posting thread
// must not hold the next writes back for long.
const maxCorkWindow = 250 * time.Microsecond

// postStartLocked reads the clock before a crossing on a device in software
// that posts a transfer the device copies from the send ring, for
// notePostLocked. Any other crossing (hardware, inline, control or receives
// only) is not timed, and so pays no second clock read.
func (c *Conn) postStartLocked() (start time.Duration, timed bool) {
	if c.softPosts && c.set.Ring.Autocork {
		for i := range c.sends {
			if c.sends[i].NumSGE > 0 && !c.sends[i].Inline {
				return monotonic(), true
			}
		}
	}
	return 0, false
}

// notePostLocked records, after a crossing, when it last posted sends
// (lastPost) and, if postStartLocked timed it, how long it took (postCost).
func (c *Conn) notePostLocked(start time.Duration, timed bool) {
	if len(c.sends) == 0 || !c.set.Ring.Autocork {
		return
	}
	now := monotonic()
	c.lastPost = now
	if timed {
		c.postCost = nextPostCost(c.postCost, now-start)
	}
}

// nextPostCost is the average of post durations after one of d: weight
// 1/4, each one counted at most maxCorkWindow.
func nextPostCost(avg, d time.Duration) time.Duration {
	return avg + (min(d, maxCorkWindow)-avg)/4
}

// monoBase anchors monotonic, which reads only the monotonic clock: the
// wall clock that time.Now also reads costs as much again on some
// machines.
var monoBase = time.Now()

func monotonic() time.Duration { return time.Since(monoBase) }
