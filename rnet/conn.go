package rnet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// conn is one connection's state and the goroutines that drive it; the
// user holds it through a Conn, so that a Conn nobody references can be
// collected even while the pusher, the keepalive timer and the transport's
// event goroutine still reference the conn (see Conn).
//
// All methods may be called concurrently. Concurrent Reads (and concurrent
// Writes) are serialised, so one Write's bytes are never interleaved with
// another's.
type conn struct {
	qp           queuePair
	laddr, raddr net.Addr
	set          settings

	// mu guards the engine and everything Read, Write, Close and the
	// pusher share.
	mu        sync.Mutex
	eng       *ring.Engine
	sends     []ring.SendWR
	recvs     []ring.RecvWR
	wcs       []ring.Completion
	readShut  bool  // CloseRead: inbound bytes are discarded
	closing   bool  // Close has begun: inbound bytes are discarded, calls fail
	transDown bool  // the transport reported the connection gone
	fatal     error // a failure the engine cannot see (a failed post, a removed device)
	drainBuf  []byte
	polls     uint64
	spins     uint64 // waits that busy-polled (Stats.Spins)
	parks     uint64 // waits that parked (Stats.Parks)

	readMu, writeMu sync.Mutex

	// polling: one blocked caller (Read, Write or Close) owns the wait on
	// the completion channel and drives the engine when it wakes, so the
	// goroutine that needs the data is the one the netpoller wakes. Other
	// blocked callers park on their channel below; queued counts them.
	polling bool
	queued  int
	// armed says the CQ has been armed and every event since taken by a
	// crossing that armed it again (takePostPoll): so any completion not
	// yet polled has left an event on the completion channel, and a
	// caller can wait without first crossing to arm and poll.
	armed bool
	// spinning says the caller driving the engine busy-polls: its polls
	// may repeat inside the crossing (see spinPollTries).
	spinning bool
	// pusher is the connection's background goroutine: it polls the CQ
	// while the engine holds work that waits for a completion (bytes a
	// returned Write left in the send ring, a credit update the peer
	// needs) and no caller is blocked. pushing says it is (about to be)
	// at work; pushWake starts it.
	pushing    bool
	pushWake   chan struct{}
	pusherDone chan struct{}
	// readied says this connection has woken one of its own goroutines
	// (the pusher, a queued caller) since a spinning caller last yielded:
	// the woken one may sit in the spinner's run queue (see busyPoll).
	readied bool

	// Wakeups, each with room for one pending signal so none is lost
	// between checking the engine and parking.
	readable   chan struct{}
	writable   chan struct{}
	changed    chan struct{} // anything happened: for Close's waits
	pollerFree chan struct{} // the completion channel wait is free to take

	closed    chan struct{} // closed when Close begins
	closeOnce sync.Once
	closeErr  error
	readDL    deadline
	writeDL   deadline
	keepalive *time.Timer // keepalives and housekeeping, see tick
	// Keepalive ticks in a row that found sends in flight and not one
	// send completion since the previous tick, and that count then.
	kaStalled  int
	kaSendDone uint64

	// How long recent Reads waited for replies, for the adaptive spin;
	// guarded by readMu. wroteSinceRead (guarded by mu) says a Write came
	// after the last Read that returned data: the next wait is for a reply.
	// replyRest (guarded by readMu) says the last Read returned the start
	// of a reply: the next wait is for its rest (see restWindow).
	readWait       waitEstimate
	wroteSinceRead bool
	replyRest      bool
	// streamSpin (guarded by readMu) decides whether a Read that does not
	// wait for a reply spins at all.
	streamSpin streamSpin
}

// streamSpin stops the BusyPoll spin of Reads that are not waiting for a
// reply (a streaming reader) while such spins rarely catch their data:
// then the spin only burns CPU and a crossing into C per round. In the
// Soft-RoCE lab, a 64 KiB stream's reader caught its data in about one
// spin in twenty (829-1029 spins, 781-977 parks for 1,024 writes), which
// cost it about 2.5 CQ polls per write; a 1 KiB stream's reader caught it
// in about two spins in five, and stopping after a few misses in a row
// cost it parks and throughput. So the rule follows the share of spins
// that catch their data (an average over about the last eight): below
// streamHitsMin, Reads skip the spin, except that every probeEvery-th one
// spins to find out whether data now comes sooner.
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
// while spinning does not pay.
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

// waitEstimate is a running average of how long blocked calls waited, each
// wait counted as at most the spin limit: one long wait (a pause in the
// traffic, or a park and wakeup, which costs more than the spin would have)
// must not push the window past the limit and so stop the spinning that
// serves the usual short waits.
//
// Once the average passes half the limit, spinning is off: waits spin only
// BusyPoll, then park. A parked wait lasts as long as the park and wakeup
// take, whatever the reply time was, so those waits cannot show that
// replies got quick again; left to them, a connection whose spinning went
// off after a run of slow replies never spins again. (Under emulation a
// park costs 0.6-1 ms: in the Soft-RoCE lab, 64 B round trips then sat at
// a p50 of 580-730 µs instead of 65-83 µs.) So while spinning is off,
// only probes are counted: a probe spins the whole limit, and if its reply
// comes within the limit, the average restarts from it. The first wait
// after spinning goes off probes, then the gaps double up to probeEvery,
// so that one slow spell costs little and a slow peer one long spin per
// probeEvery waits.
//
// A spin also lasts at least as long as a park and wakeup costs, once
// that is measured: a reply that has not come by twice the average may
// still come soon, and spinning until a park would have paid off costs at
// most twice what the better choice would have (the ski-rental rule).
// The limit itself rises to the park's cost, unless Config.BusyPollLimit
// fixed it. The cost is measured on waits whose window was only twice the
// average: a park that begins just after the usual reply time lasts mostly
// as long as the park itself takes. Waits that spun as long as a park are
// not measured, since what parks after them is a reply later than that,
// and charging its lateness to the park would ratchet the window up.
// Every measureEvery-th wait is such a measurement, so the estimate
// follows the machine's load. In the Soft-RoCE lab, where a park costs
// 0.6-1 ms, this took default-mode 64 B round trips from a mean of
// 111-368 µs to 84-122 µs and 1 KiB ones from 242-298 µs to 121-171 µs
// in 3 of 4 interleaved pairs (the fourth, 374 µs, had both ends stuck
// parking), with less CPU per round trip: there a park and wakeup costs
// more CPU than the spin it replaces. (4 KiB round trips did not gain:
// their second Read parked, which restWindow fixed.) On hardware a park
// costs less than the 250 µs floor, and nothing changes.
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
// is known (see waitEstimate).
const measureEvery = 32

// observePark counts a park of d that ended a measuring wait. The cost is
// the median of the last parkSamples. A park lasts its own cost plus
// however late the reply came after the spin gave up, and the cost itself
// varies widely (100 µs to 2 ms in the Soft-RoCE lab); the median shrugs
// off the few very late replies. The lower quartile, tried first, kept the
// window below a typical park of the peer, so two ends that had both gone
// to parking each waited out the other's wakeup and stayed there: 1 KiB
// round trips averaged 154-524 µs against 115-144 µs with the median (6
// interleaved pairs), although 64 B ones did better, 86-186 against
// 124-223 µs.
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

// restWindow is the spin of a Read that waits for the rest of a reply
// whose start the previous Read returned: as long as a reply wait spins
// now, without counting as one. A reply longer than the first transfer
// after an idle spell (ring.StartTransfer, 2 KiB) comes as two RDMA
// writes, and io.ReadFull's second Read used to wait for the second with
// only BusyPoll's spin: in the Soft-RoCE lab, where a park costs 0.6-1 ms,
// that made 4 KiB round trips take about 1 ms at the median against
// 290 µs for the same traffic polling. With it, 4 interleaved pairs: 4 KiB
// round trips 251-353 against 758-878 µs at the median, 358-441 against
// 1069-1261 µs on average, with half the CPU; 64 KiB ones 3.9-4.7 against
// 4.3-4.9 ms; 64 B and 1 KiB (one transfer) level. Only one Read is a
// continuation,
// so a request followed by a long download does not spin on every chunk
// of it.
func (w *waitEstimate) restWindow(s *settings) time.Duration {
	d, limit := s.busyPoll, w.limit(s)
	if d <= 0 || limit <= d || w.spinOff(limit) {
		return max(d, 0)
	}
	return min(max(d, 2*w.avg, w.park), limit)
}

// limit is the longest spin of this connection's waits: the configured
// limit, raised to the measured cost of a park up to the ceiling (see
// Config.BusyPollLimit).
func (w *waitEstimate) limit(s *settings) time.Duration {
	return min(max(s.busyPollLimit, w.park), s.busyPollLimitMax)
}

// probeEvery is the longest gap between probes (see waitEstimate).
const probeEvery = 16

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

// keepaliveProbes is how many keepalive periods in a row sends may stay
// unacknowledged before the peer is declared gone, like TCP's keepalive
// probe count.
const keepaliveProbes = 3

// keepaliveProbesBusyPeer replaces keepaliveProbes while the sends in
// flight may be waiting for the peer to post receives (see
// ring.Engine.PeerMayLackReceives): a C rsocket peer whose application
// does not call into the library for a while is alive, and its device
// answers our retries, as a TCP peer advertising a zero window is. A
// minute's idleness (four periods of 15 s) must not pass for death there;
// twenty periods, five minutes by default, still end a truly dead one.
const keepaliveProbesBusyPeer = 20

// completionBatch is how many completions one poll of the CQ moves, in one
// crossing into C.
const completionBatch = 64

// spinPollTries is how many times a busy-polling round polls an empty CQ in
// its one crossing into C. Counted, not timed: a clock read in C costs as
// much as a poll under emulation, and the Go side of the round still
// checks the window, the deadline and whether to yield, every few
// microseconds at most. (An earlier spin that stayed in C for up to 5 or
// 20 µs made 64 B round trips far slower; see the README.)
const spinPollTries = 16

// housekeepingPeriod is how often an idle connection with keepalives off
// still drives its engine. Nothing polls the CQ while no call is blocked
// (as in rsocket), and the peer's control messages each use a posted
// receive; this reposts them long before the headroom runs out.
const housekeepingPeriod = 15 * time.Second

// newConn starts driving an established engine over qp, and hands it out.
func newConn(qp queuePair, eng *ring.Engine, set settings) *Conn {
	return newHandle(startConn(qp, eng, set))
}

// startConn starts driving an established engine over qp.
func startConn(qp queuePair, eng *ring.Engine, set settings) *conn {
	layout := eng.Layout()
	c := &conn{
		qp:         qp,
		laddr:      qp.localAddr(),
		raddr:      qp.remoteAddr(),
		set:        set,
		eng:        eng,
		sends:      make([]ring.SendWR, 0, layout.SendDepth),
		recvs:      make([]ring.RecvWR, 0, layout.RecvDepth),
		wcs:        make([]ring.Completion, completionBatch),
		readable:   make(chan struct{}, 1),
		writable:   make(chan struct{}, 1),
		changed:    make(chan struct{}, 1),
		pollerFree: make(chan struct{}, 1),
		pushWake:   make(chan struct{}, 1),
		pusherDone: make(chan struct{}),
		closed:     make(chan struct{}),
		readDL:     newDeadline(qp.kick),
		writeDL:    newDeadline(qp.kick),
	}
	c.mu.Lock()
	c.driveLocked()
	c.mu.Unlock()
	qp.start(c)
	go c.pusher()
	// Under c.mu: the timer's callback reads the field under c.mu, and
	// nothing else orders it after this write.
	c.mu.Lock()
	c.keepalive = time.AfterFunc(c.tickPeriod(), c.tick)
	c.mu.Unlock()
	return c
}

// block parks the caller until ready (called with c.mu held) may have become
// true, stop or cancel is closed (either may be nil), or the connection
// fails. The first blocked caller waits on the completion channel itself and
// drives the engine when the netpoller wakes it: one wakeup per event, not a
// wakeup of a progress goroutine followed by a wakeup of the reader. Later callers park on wake
// (signalled by whoever drives) until the wait is theirs to take. The caller
// re-checks its condition after block returns; wakeups may be spurious.
// parked says the caller did wait (on a channel or for an event), rather
// than find its condition already true.
func (c *conn) block(ready func() bool, wake chan struct{}, stop, cancel <-chan struct{}) (parked bool) {
	c.mu.Lock()
	if c.polling {
		// Look again under the lock that signalLocked holds: from here on
		// a change is signalled to us, since queued is no longer 0.
		if ready() || c.fatal != nil || c.eng.Err() != nil {
			c.mu.Unlock()
			return false
		}
		c.queued++
		c.parks++
		c.mu.Unlock()
		handedOver := false
		select {
		case <-wake:
		case <-c.pollerFree:
			handedOver = true
		case <-stop:
		case <-cancel:
		}
		c.mu.Lock()
		c.queued--
		if !handedOver || c.polling {
			// Whoever handed the wait over (to any queued caller) may
			// have stopped pushing for an engine that still needs it,
			// and this caller may not come back: if nobody else is
			// queued, the pusher takes over.
			if !c.polling && c.queued == 0 {
				c.pushIfBlockedLocked()
			}
			c.mu.Unlock()
			return true
		}
		// The wait was handed to us: take it now, even if we are about
		// to leave, so that it never rests with nobody (release passes
		// it on).
		parked = true
	}
	c.polling = true
	c.mu.Unlock()
	if c.awaitEvent(func() bool {
		return ready() || c.fatal != nil || c.eng.Err() != nil || isClosed(stop) || isClosed(cancel)
	}) {
		parked = true
	}
	c.release()
	return parked
}

// awaitEvent is one round of the owner of the completion channel wait: arm
// the CQ and drive the engine; unless done (called with c.mu held) now
// holds, wait for the next event and drive again, taking the event and
// arming again in that drive's crossing. The CQ so stays armed, and the
// next wait crosses into C beforehand only if it has work to post: a park
// costs one crossing, and a wait that finds a completion came meanwhile
// costs the one that polls it. A deadline, Close or a transport event
// kicks the wait; after shutdown it fails for good, and the caller then
// sees why. parked says the wait found no event at first and parked.
func (c *conn) awaitEvent(done func() bool) (parked bool) {
	c.mu.Lock()
	if c.armed {
		// Nothing to poll: whatever completed since the last poll has
		// left an event, and wait returns at once for it.
		c.flushLocked()
	} else {
		// Arm before polling (in the same crossing): a completion that
		// lands after the poll then still produces an event for wait.
		c.stepLocked(true, armFirst)
	}
	finished := done()
	c.mu.Unlock()
	if finished {
		return false
	}
	parked, err := c.qp.wait()
	c.mu.Lock()
	if parked {
		c.parks++
	}
	if err == nil {
		c.stepLocked(true, takeFirst)
	}
	c.mu.Unlock()
	return parked
}

// release gives up the completion channel wait: to a queued caller if there
// is one, else to the pusher if the engine needs it.
func (c *conn) release() {
	c.mu.Lock()
	c.polling = false
	handOff := c.queued > 0
	if !handOff {
		c.pushIfBlockedLocked()
	}
	c.mu.Unlock()
	if handOff {
		notify(c.pollerFree)
	}
}

// pushIfBlockedLocked starts the pusher when the engine waits for a
// completion and no caller is waiting on the completion channel.
func (c *conn) pushIfBlockedLocked() {
	if !c.polling && !c.pushing && !c.closing && c.fatal == nil && c.eng.Blocked() {
		c.pushing = true
		c.readied = true
		notify(c.pushWake)
	}
}

// pusher polls for completions on behalf of nobody in particular, while the
// engine has work that waits for one (see Engine.Blocked) and no Read, Write
// or Close is blocked. It is parked on pushWake the rest of the time, so a
// busy connection's events wake the caller that waits for them, not it.
func (c *conn) pusher() {
	defer close(c.pusherDone)
	for {
		select {
		case <-c.pushWake:
		case <-c.closed:
			return
		}
		for {
			c.mu.Lock()
			if c.polling || c.closing || c.fatal != nil || !c.eng.Blocked() {
				c.pushing = false
				c.mu.Unlock()
				break
			}
			c.polling = true
			c.mu.Unlock()
			c.awaitEvent(func() bool {
				return c.fatal != nil || !c.eng.Blocked() || c.queued > 0 || c.closing
			})
			c.mu.Lock()
			c.polling = false
			handOff := c.queued > 0
			if handOff {
				// Stop pushing before the wait changes hands, so that a
				// caller that receives it and leaves can start us again
				// (see block).
				c.pushing = false
			}
			c.mu.Unlock()
			if handOff {
				// A caller blocked meanwhile: the wait is its now.
				notify(c.pollerFree)
				break
			}
		}
	}
}

// kickLocked wakes the caller waiting on the completion channel, for news
// that does not come through the CQ (Close, CloseRead, a transport event).
func (c *conn) kickLocked() {
	if c.polling {
		c.qp.kick()
	}
}

// driveLocked posts whatever work the engine has and polls completions into
// it, until the CQ is empty and nothing is left to post, and wakes whoever
// can now proceed. Each round is one crossing into C (see postPoll).
func (c *conn) driveLocked() { c.stepLocked(true, plainFirst) }

// driveMovedLocked is driveLocked that reports whether anything moved:
// work posted or completions polled.
func (c *conn) driveMovedLocked() bool { return c.stepLocked(true, plainFirst) }

// flushLocked is driveLocked for a caller that needs no news from the CQ
// (a Read that found data): it crosses into C only when there is work to
// post.
func (c *conn) flushLocked() { c.stepLocked(false, plainFirst) }

// firstCrossing is what the first crossing of a step does besides posting
// and polling.
type firstCrossing int

const (
	plainFirst firstCrossing = iota
	armFirst                 // arm the CQ: the caller is about to wait on the channel
	takeFirst                // take the event that woke the caller's wait
)

// stepLocked is driveLocked (poll) or flushLocked, with first's extra work
// folded into the first round's crossing.
func (c *conn) stepLocked(poll bool, first firstCrossing) (moved bool) {
	for {
		c.recvs, c.sends = c.recvs[:0], c.sends[:0]
		switch {
		case c.fatal != nil:
		case poll || c.eng.RepostDue():
			// Receives go first: the engine only grants credits for
			// receives that are back on the queue.
			c.recvs = c.eng.PostRecvs(c.recvs)
			c.sends = c.eng.PostSends(c.sends)
		default:
			// A crossing only to repost receives can wait (see
			// Engine.RepostDue): they go with this round's sends if
			// there are any, else with the next crossing. No credit
			// update is due, so PostSends does not miss one.
			c.sends = c.eng.PostSends(c.sends)
			if len(c.sends) > 0 {
				c.recvs = c.eng.PostRecvs(c.recvs)
			}
		}
		if !poll && len(c.recvs) == 0 && len(c.sends) == 0 {
			break
		}
		wcs := c.wcs
		if c.fatal != nil {
			wcs = c.wcs[:0] // a failed QP only flushes; the engine has failed too
		}
		var n int
		var err error
		switch first {
		case armFirst:
			n, err = c.qp.armPostPoll(c.recvs, c.sends, wcs)
		case takeFirst:
			n, err = c.qp.takePostPoll(c.recvs, c.sends, wcs)
		default:
			if c.spinning && len(wcs) > 0 {
				n, err = c.qp.postPollTries(c.recvs, c.sends, wcs, spinPollTries)
			} else {
				n, err = c.qp.postPoll(c.recvs, c.sends, wcs)
			}
		}
		c.polls++
		if err != nil {
			c.failLocked(err)
			break
		}
		if first != plainFirst {
			c.armed = true
		}
		first = plainFirst
		if n > 0 {
			c.eng.Complete(c.wcs[:n]) // a fatal error is kept in eng.Err
		}
		if n > 0 || len(c.recvs) > 0 || len(c.sends) > 0 {
			moved = true
		}
		if c.closing || c.readShut {
			c.discardInboundLocked()
		}
		// A full batch may have left more behind; otherwise go round
		// again only if the completions freed work to post.
		poll = n == len(wcs) && n > 0
	}
	c.signalLocked()
	c.pushIfBlockedLocked()
	return moved
}

// discardInboundLocked consumes received bytes nobody will read, so the peer
// keeps its credits and can go on reading what we still have to send.
func (c *conn) discardInboundLocked() {
	if c.eng.ReadableBytes() == 0 {
		return
	}
	if c.drainBuf == nil {
		c.drainBuf = make([]byte, 64<<10)
	}
	for {
		n, err := c.eng.Read(c.drainBuf)
		if n == 0 || err != nil {
			return
		}
	}
}

func (c *conn) failLocked(err error) {
	if c.fatal == nil {
		c.fatal = err
		c.eng.Fail(err)
		c.kickLocked()
	}
}

func (c *conn) signalLocked() {
	if c.queued == 0 {
		return // nobody parked on a channel (see block)
	}
	c.readied = true
	failed := c.fatal != nil || c.eng.Err() != nil
	if failed || c.eng.Readable() || c.readShut {
		notify(c.readable)
	}
	if failed || c.eng.Writable() {
		notify(c.writable)
	}
	notify(c.changed)
}

// readReadyLocked reports whether a blocked Read has something to return.
func (c *conn) readReadyLocked() bool { return c.eng.Readable() || c.readShut || c.closing }

// writeReadyLocked reports whether a blocked Write can make progress.
func (c *conn) writeReadyLocked() bool { return c.eng.Writable() || c.closing }

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// spinWindow is how long a Read that waits for a reply spins before
// parking: BusyPoll, or twice the recent average wait when that is longer,
// or the cost of a park when that is longer still, within the limit (see
// Config); or the whole limit for a probe while spinning is off (see
// waitEstimate). measure says a park after this spin measures what a park
// costs.
func (c *conn) spinWindow(w *waitEstimate) (window time.Duration, measure bool) {
	d, limit := c.set.busyPoll, w.limit(&c.set)
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

// busyPoll drives the connection for up to window, until ready reports
// true or until deadline is closed, so a reply that is microseconds away
// does not cost a park and a wakeup through the completion channel. The
// deadline matters once BusyPoll is long (polling the way rstream does):
// a spin must not outlive the caller's deadline. reply says the caller
// waits for the answer to its own Write.
func (c *conn) busyPoll(window time.Duration, ready func() bool, deadline <-chan struct{}, reply bool) {
	if window <= 0 {
		return
	}
	start := time.Now()
	end := start.Add(window)
	wakesPeer := c.qp.wakesPeer()
	// The clock is read only every few rounds where a round is much
	// shorter than the window, because a clock read can cost more than a
	// poll (2.2 µs on an emulated HPET). A fixed stride of 32 rounds made
	// a 10 µs spin last 100-200 µs under emulation, where a round takes
	// several µs, so the stride follows the measured round time: about
	// eight looks per window, at most 32 rounds apart.
	look, lastLook, lastSpin := 1, start, 0
	for spin := 1; ; spin++ {
		c.mu.Lock()
		if c.closing {
			// Close may release the queue pair once it has the
			// completion channel, which a spinner does not hold.
			c.mu.Unlock()
			return
		}
		if spin == 1 {
			c.spins++
		}
		c.spinning = true
		moved := c.driveMovedLocked()
		c.spinning = false
		ok := ready() || c.fatal != nil || c.closing
		yield := (moved || spin == 1) && (c.readied || wakesPeer) || spin == 1 && reply
		if yield {
			c.readied = false
		}
		c.mu.Unlock()
		if ok {
			return
		}
		if spin == look {
			now := time.Now()
			if !now.Before(end) || isClosed(deadline) {
				return
			}
			perRound := max(now.Sub(lastLook)/time.Duration(spin-lastSpin), 1)
			look += int(min(max(window/8/perRound, 1), 32))
			lastLook, lastSpin = now, spin
		}
		// A goroutine that this caller woke (the peer's reader over the
		// simulated fabric, our pusher, a queued caller) sits in this P's
		// runnext, where an idle P steals it only after a delay: it would
		// wait for the spin to end. So yield once at the start, for what
		// the call did before it spun, and after each round that moved
		// something. Without this a spinning writer starved the reader it
		// had just fed: 3.4 against 11 GB/s over the simulated fabric at
		// 64 KiB. But yield only when such a goroutine may exist: Gosched
		// also wakes an idle P's thread to look for work, and on a device,
		// whose peer the kernel wakes, that thread only takes a CPU from
		// the peer process. In the two-CPU lab a 64 KiB stream's reader
		// yielded once per message; without that the writer next to it
		// moved a median of 39 against 32 MB/s (14 interleaved pairs over
		// three guest boots: 9 better, 3 level, 2 worse). A Read that
		// waits for a reply still yields once, at the start: without it,
		// 1 KiB round trips took 738-1338 µs on average instead of
		// 406-560 µs (5 pairs), and with it they are level again. Why is
		// not pinned down; request/response has no writer to starve.
		// Empty rounds never yield: under emulation a yield costs as much
		// as a poll.
		if yield {
			runtime.Gosched()
		}
	}
}

// Read: see Conn.Read.
func (c *conn) Read(b []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if len(b) == 0 {
		// As *net.TCPConn: nothing to wait for, so no deadline applies.
		if isClosed(c.closed) {
			return 0, c.opError("read", net.ErrClosed)
		}
		return 0, nil
	}
	spun := false
	var (
		waitStart time.Time     // set once Read finds nothing to return
		window    time.Duration // the spin window of this wait
		reply     bool          // this Read waits for the answer to a Write
		measure   bool          // a park in this wait measures a park's cost
		parkStart time.Time     // when the first block began, if measure
		parked    bool          // a block did park, if measure
		streamed  bool          // this wait spun under streamSpin's rule
		blocked   bool          // the spin ended without data: this Read went on to block
	)
	for {
		if isClosed(c.readDL.wait()) {
			if isClosed(c.closed) {
				return 0, c.opError("read", net.ErrClosed)
			}
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return 0, c.opError("read", net.ErrClosed)
		}
		if c.readShut {
			c.mu.Unlock()
			return 0, io.EOF
		}
		n, err := c.eng.Read(b)
		if n > 0 {
			// Consuming may earn the peer a credit update: send it now.
			c.flushLocked()
			c.replyRest = c.wroteSinceRead
			c.wroteSinceRead = false
			c.mu.Unlock()
			if spun && reply {
				c.readWait.observe(time.Since(waitStart), window, c.readWait.limit(&c.set))
				if parked {
					c.readWait.observePark(time.Since(parkStart))
				}
			}
			if streamed {
				c.streamSpin.observe(!blocked)
			}
			return n, nil
		}
		if err == nil && c.fatal != nil {
			err = c.fatal
		}
		if !spun {
			// What kind of wait this is is settled when it begins: a
			// Write while it waits does not make it a reply wait.
			reply = c.wroteSinceRead
		}
		c.mu.Unlock()
		if err != nil {
			return 0, c.opError("read", err)
		}
		if !spun {
			spun = true
			// Only a Read that waits for the answer to our own Write
			// (request and response) spins adaptively: a streaming
			// reader's long spin would only take CPU from the writer,
			// and it spins at all only while its spins catch data
			// (streamSpin).
			window = c.set.busyPoll
			if reply {
				waitStart = time.Now()
				window, measure = c.spinWindow(&c.readWait)
			} else if c.replyRest {
				window = c.readWait.restWindow(&c.set)
			} else {
				window = c.streamSpin.window(c.set.busyPoll)
				streamed = window > 0
			}
			c.busyPoll(window, c.readReadyLocked, c.readDL.wait(), reply)
			continue
		}
		blocked = true
		if measure && parkStart.IsZero() {
			parkStart = time.Now()
		}
		if c.block(c.readReadyLocked, c.readable, c.readDL.wait(), c.closed) && measure {
			parked = true
		}
	}
}

// Write: see Conn.Write.
func (c *conn) Write(b []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	written := 0
	spun := false
	for {
		if isClosed(c.writeDL.wait()) {
			if isClosed(c.closed) {
				return written, c.opError("write", net.ErrClosed)
			}
			return written, c.opError("write", os.ErrDeadlineExceeded)
		}
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return written, c.opError("write", net.ErrClosed)
		}
		if c.fatal != nil {
			err := c.fatal
			c.mu.Unlock()
			return written, c.opError("write", err)
		}
		n, err := c.eng.Write(b[written:])
		written += n
		if n > 0 {
			c.wroteSinceRead = true
		}
		if n > 0 {
			c.driveLocked()
		}
		c.mu.Unlock()
		if err != nil {
			return written, c.opError("write", err)
		}
		// Like TCP, return once every byte is in the send buffer; what
		// waits there for credits the pusher sends.
		if written == len(b) {
			return written, nil
		}
		if n > 0 {
			spun = false
		}
		if !spun {
			spun = true
			// A writer waits for the peer's reader to free room; spinning
			// longer than BusyPoll would only take CPU from that reader.
			c.busyPoll(c.set.busyPoll, c.eng.Writable, c.writeDL.wait(), false)
			continue
		}
		c.block(c.writeReadyLocked, c.writable, c.writeDL.wait(), c.closed)
	}
}

// CloseWrite: see Conn.CloseWrite.
func (c *conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("close", net.ErrClosed)
	}
	c.eng.CloseWrite()
	c.driveLocked()
	return nil
}

// CloseRead: see Conn.CloseRead.
func (c *conn) CloseRead() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("close", net.ErrClosed)
	}
	c.readShut = true
	c.driveLocked()
	c.kickLocked()
	return nil
}

// Close: see Conn.Close.
func (c *conn) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.closeErr = c.close()
	})
	if !first {
		return c.opError("close", net.ErrClosed)
	}
	return c.closeErr
}

func (c *conn) close() error {
	c.mu.Lock()
	c.closing = true
	close(c.closed)
	c.driveLocked()
	c.kickLocked() // a Read or Write parked on the completion channel returns
	c.keepalive.Stop()
	c.mu.Unlock()
	c.readDL.stop()
	c.writeDL.stop()

	lingered := make(chan struct{})
	linger := time.AfterFunc(c.set.linger, func() {
		close(lingered)
		c.qp.kick()
	})
	defer linger.Stop()
	// First the data already written, like a TCP FIN after the send
	// buffer drains.
	sent := c.closeWait(lingered, func() bool {
		return c.eng.Flushed() || c.eng.Finished() || c.transDown || c.fatal != nil
	})
	c.mu.Lock()
	var closeErr error
	switch {
	case c.transDown || c.fatal != nil || c.eng.Err() != nil || c.eng.PeerDisconnected():
		// Nothing more can go out, or the peer is already gone.
	case sent:
		c.eng.Close()
	default:
		if dropped := c.eng.Abort(); dropped > 0 {
			// The peer sees the connection torn down, not a clean
			// end, and the caller learns that bytes were lost.
			closeErr = fmt.Errorf("%w: %d bytes written were not sent within Linger (%v)", ErrAborted, dropped, c.set.linger)
		}
	}
	c.driveLocked()
	c.mu.Unlock()
	// Then our DISCONNECT, so the peer sees an orderly close rather than
	// a torn-down queue pair.
	c.closeWait(lingered, func() bool {
		return c.eng.Flushed() || c.transDown || c.fatal != nil || c.eng.Err() != nil
	})
	c.qp.disconnect()
	c.qp.shutdown()
	<-c.pusherDone
	// Take the completion channel for good: once a caller still parked
	// there has left (shutdown failed its wait), nothing touches the
	// queue pair again and it can be released.
	c.takePoller()
	if err := c.qp.release(); err != nil {
		closeErr = errors.Join(closeErr, err)
	}
	return c.opError("close", closeErr)
}

// closeWait drives the connection until cond (called with c.mu held) holds
// or timeout is closed, and reports whether cond held.
func (c *conn) closeWait(timeout <-chan struct{}, cond func() bool) bool {
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return true
		}
		if isClosed(timeout) {
			return false
		}
		c.block(cond, c.changed, timeout, nil)
	}
}

// takePoller makes the caller the owner of the completion channel wait and
// never gives it back.
func (c *conn) takePoller() {
	for {
		c.mu.Lock()
		if !c.polling {
			c.polling = true
			c.mu.Unlock()
			return
		}
		c.queued++
		c.mu.Unlock()
		<-c.pollerFree
		c.mu.Lock()
		c.queued--
		c.mu.Unlock()
	}
}

// tickPeriod is the keepalive period, or the housekeeping period when
// keepalives are off.
func (c *conn) tickPeriod() time.Duration {
	if c.set.keepAlive > 0 {
		return c.set.keepAlive
	}
	return housekeepingPeriod
}

// tick runs every tickPeriod: it sends a keepalive (when they are on) and
// drives the engine, which on an idle connection is the only thing that
// reposts the receives the peer's control messages used.
func (c *conn) tick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	switch {
	case c.fatal != nil:
		return // nothing left to keep alive
	case c.set.keepAlive > 0:
		c.keepaliveLocked()
	default:
		c.driveLocked()
	}
	c.keepalive.Reset(c.tickPeriod())
}

func (c *conn) keepaliveLocked() {
	// A peer that is gone without a word (its link down, its host dead)
	// shows as sends that never complete. The transport's retries should
	// end that with a failed completion, but some devices retry without
	// limit (rxe takes retry_count 7, which rsocket and rnet use, as
	// "forever"), so give up after keepaliveProbes idle periods without a
	// single send completion.
	c.driveLocked()
	done := c.eng.Stats().SendCompletions
	if c.eng.InFlight() > 0 && done == c.kaSendDone {
		c.kaStalled++
	} else {
		c.kaStalled = 0
	}
	c.kaSendDone = done
	limit := keepaliveProbes
	if c.eng.PeerMayLackReceives() {
		limit = keepaliveProbesBusyPeer
	}
	if c.kaStalled >= limit {
		c.failLocked(fmt.Errorf("%w: no acknowledgement for %d keepalive periods of %v",
			ErrPeerGone, c.kaStalled, c.set.keepAlive))
		c.signalLocked()
		return
	}
	c.eng.Keepalive()
	c.driveLocked()
}

// transportDisconnected is called when the connection manager reports the
// connection gone. If the peer said goodbye with DISCONNECT first, this is
// just the end of an orderly close; otherwise the peer vanished.
func (c *conn) transportDisconnected() {
	c.mu.Lock()
	c.driveLocked() // account what arrived before the disconnect
	c.transDown = true
	if !c.eng.Finished() || c.eng.Err() != nil {
		// An error already there stays, unless it is a flush: the
		// disconnect is what caused that.
		c.eng.Fail(ErrPeerGone)
	}
	c.signalLocked()
	c.kickLocked()
	c.mu.Unlock()
	// Answer the peer's disconnect request so its side completes promptly.
	c.qp.disconnect()
}

func (c *conn) transportFailed(err error) {
	c.mu.Lock()
	c.transDown = true
	c.failLocked(err)
	c.signalLocked()
	c.kickLocked()
	c.mu.Unlock()
}

func (c *conn) opError(op string, err error) error {
	return opError(op, c.laddr, c.raddr, err)
}

// LocalAddr: see Conn.LocalAddr.
func (c *conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr: see Conn.RemoteAddr.
func (c *conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline: see Conn.SetDeadline.
func (c *conn) SetDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return c.opError("set", net.ErrClosed)
	}
	c.readDL.set(t)
	c.writeDL.set(t)
	return nil
}

// SetReadDeadline: see Conn.SetReadDeadline.
func (c *conn) SetReadDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return c.opError("set", net.ErrClosed)
	}
	c.readDL.set(t)
	return nil
}

// SetWriteDeadline: see Conn.SetWriteDeadline.
func (c *conn) SetWriteDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return c.opError("set", net.ErrClosed)
	}
	c.writeDL.set(t)
	return nil
}
