package stream

import (
	"slices"
	"time"
)

// The spin policy: how long a blocked Read or Write busy-polls the CQ
// before it parks in the netpoller. Spinning pays when the data comes
// sooner than a park and wakeup would take; these types learn, per
// connection, whether it does. They only decide; busyPoll (wait.go) spins.
// docs/performance.md has the measurements behind each rule.

// streamSpin stops the spin of Reads that do not wait for a reply (a
// streaming reader) while such spins rarely catch their data, since then
// the spin only takes CPU from the writer. It follows the share of spins
// that caught data, a running average over about the last eight.
type streamSpin struct {
	hits    float64 // running share of spins that caught their data
	spins   int     // spins observed, up to streamSpinWarmup
	skipped int     // waits since the last probe while spinning is off
}

// streamHitsMin is the share of spins that must catch their data for a
// streaming Read to keep spinning, and streamSpinWarmup how many spins are
// observed before the rule applies.
const (
	streamHitsMin    = 1.0 / 8
	streamSpinWarmup = 8
)

// window is the spin window for the next streaming wait: busyPoll, or 0
// while spinning does not pay, except that every probeEvery-th wait spins
// to find out whether data now comes sooner.
func (s *streamSpin) window(busyPoll time.Duration) time.Duration {
	if busyPoll <= 0 || s.spins < streamSpinWarmup || s.hits >= streamHitsMin {
		return busyPoll
	}
	if s.skipped++; s.skipped >= probeEvery {
		s.skipped = 0
		return busyPoll
	}
	return 0
}

// observe records how a wait that spun ended: caught says its data came
// during the spin.
func (s *streamSpin) observe(caught bool) {
	hit := 0.0
	if caught {
		hit = 1
	}
	if s.spins < streamSpinWarmup {
		s.spins++ // the plain mean of the first spins, then a running average
	}
	s.hits += (hit - s.hits) / float64(s.spins)
}

// waitEstimate decides the spin of Reads that wait for the reply to their
// own Write. It keeps a running average of how long such waits took, each
// counted as at most the spin limit, so that one long pause cannot push the
// window past the limit and stop the spinning that serves the usual short
// waits.
//
// Once the average passes half the limit, spinning is off: waits spin only
// BusyPoll, then park. Parked waits cannot show that replies got quick
// again (a park lasts as long as the wakeup takes), so while spinning is
// off only probes count: a probe spins the whole limit, and a reply within
// it restarts the average. Probes come at doubling gaps up to probeEvery.
//
// A spin also lasts at least as long as a park and wakeup costs, once that
// is measured: spinning until a park would have paid off costs at most
// twice the better choice (the ski-rental rule). The limit itself rises to
// that cost, unless rnet's Config.BusyPollLimit fixed it. The cost is measured
// every measureEvery-th wait, on waits whose window was only twice the
// average, so that what parks is mostly the park itself.
type waitEstimate struct {
	avg     time.Duration
	skipped int // waits since the last probe, while spinning is off
	gap     int // waits from one probe to the next; 0 while spinning is on

	waits   int                        // waits while spinning is on, for the measurement cadence
	parked  [parkSamples]time.Duration // the last measured parks, a ring
	nParked int                        // parks measured so far
	park    time.Duration              // the cost of a park (see observePark); 0 until measured
}

// parkSamples is how many measured parks the estimate of a park's cost
// keeps, and parkSamplesMin how many it needs before it counts.
const (
	parkSamples    = 8
	parkSamplesMin = 4
)

// measureEvery is the cadence of waits that measure a park's cost once it
// is known.
const measureEvery = 32

// probeEvery is the longest gap between probes while spinning is off.
const probeEvery = 16

// window is the spin of the next reply wait: BusyPoll, or twice the recent
// average wait when that is longer, or the cost of a park when that is
// longer still, within the limit; or the whole limit for a probe while
// spinning is off. measure says a park after this spin measures what a
// park costs.
func (w *waitEstimate) window(s *Settings) (window time.Duration, measure bool) {
	d, limit := s.BusyPoll, w.limit(s)
	if d <= 0 {
		return 0, false // spinning is off
	}
	if limit <= d {
		return d, false // no adaptive spin
	}
	if w.spinOff(limit) {
		if w.skipped++; w.skipped >= w.gap {
			w.skipped = 0
			w.gap = min(max(2*w.gap, 1), probeEvery)
			return limit, false
		}
		return d, false
	}
	w.skipped, w.gap = 0, 0
	w.waits++
	window = max(d, 2*w.avg)
	if w.park == 0 || w.waits%measureEvery == 0 {
		return window, true
	}
	return min(max(window, w.park), limit), false
}

// restWindow is the spin of a Read that waits for the rest of a reply
// whose start the previous Read returned (a reply longer than the first
// transfer comes as two RDMA writes): as long as a reply wait spins now,
// without counting as one. Only one Read is a continuation, so a long
// download after a request does not spin on every chunk.
func (w *waitEstimate) restWindow(s *Settings) time.Duration {
	d, limit := s.BusyPoll, w.limit(s)
	if d <= 0 || limit <= d || w.spinOff(limit) {
		return max(d, 0)
	}
	return min(max(d, 2*w.avg, w.park), limit)
}

// limit is the longest spin of this connection's waits: the configured
// limit, raised to the measured cost of a park up to the ceiling (see
// rnet's Config.BusyPollLimit).
func (w *waitEstimate) limit(s *Settings) time.Duration {
	return min(max(s.BusyPollLimit, w.park), s.BusyPollLimitMax)
}

// spinOff reports that recent waits were too long for spinning to pay.
func (w *waitEstimate) spinOff(limit time.Duration) bool { return 2*w.avg > limit }

// observe counts a wait of d, with the spin window it had.
func (w *waitEstimate) observe(d, window, limit time.Duration) {
	if !w.spinOff(limit) {
		w.avg += (min(d, limit) - w.avg) / 8
		return
	}
	if window < limit {
		return // not a probe: it parked after BusyPoll, and says nothing new
	}
	if d <= limit {
		w.avg = d // the probe caught a reply: spinning pays again
	}
}

// observePark counts a park of d that ended a measuring wait. The cost is
// the median of the last parkSamples: a park lasts its own cost plus
// however late the reply came after the spin gave up, and the median
// shrugs off the few very late replies.
func (w *waitEstimate) observePark(d time.Duration) {
	w.parked[w.nParked%parkSamples] = d
	w.nParked++
	n := min(w.nParked, parkSamples)
	if n < parkSamplesMin {
		return
	}
	sorted := w.parked
	slices.Sort(sorted[:n])
	w.park = sorted[n/2]
}
