package stream

import (
	"fmt"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// keepaliveProbes is how many keepalive periods in a row sends may stay
// unacknowledged before the peer is declared gone, like TCP's keepalive
// probe count.
const keepaliveProbes = 3

// keepaliveProbesBusyPeer replaces keepaliveProbes while the sends in
// flight may be waiting for the peer to post receives (see
// ring.Engine.PeerMayLackReceives): a C rsocket peer posts receives only
// when its application calls in, and is alive meanwhile, as a TCP peer
// advertising a zero window is.
const keepaliveProbesBusyPeer = 20

// minSilentTicks is how many ticks in a row must find the peer silent, however
// long the silence lasted by the clock (see keepaliveLocked).
const minSilentTicks = 2

// housekeepingPeriod is how often an idle connection with keepalives off
// still steps its engine. Nothing polls the CQ while no call is blocked
// (as in rsocket), and the peer's control messages each use a posted
// receive; this reposts them long before the headroom runs out.
const housekeepingPeriod = 15 * time.Second

// tickPeriod is the keepalive period, or the housekeeping period when
// keepalives are off.
func (c *Conn) tickPeriod() time.Duration {
	if c.keepAlive > 0 {
		return c.keepAlive
	}
	return housekeepingPeriod
}

// tick runs every tickPeriod: it sends a keepalive (when they are on) and
// steps the engine, which on an idle connection is the only thing that
// reposts the receives the peer's control messages used.
func (c *Conn) tick() {
	c.tellPeerGone(c.tickStep())
}

// tickStep is tick's work, under c.mu; it returns the error that ended
// the connection if the peer vanished and the Observer has yet to hear of
// it (a failed completion found by this step or an earlier one counts).
func (c *Conn) tickStep() (gone error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil
	}
	if c.fatal != nil {
		return c.peerGoneLocked() // nothing left to keep alive
	}
	now := keepaliveNow()
	leapt := now.Sub(c.lastTick) > tickLeap*c.tickPeriod()
	c.lastTick = now
	if c.path != pathUp {
		// A resume runs: the old path is known gone, the new one is
		// not the stream's yet.
		c.keepalive.Reset(c.tickPeriod())
		return nil
	}
	switch {
	case c.keepAlive > 0:
		c.keepaliveLocked(now, leapt)
	default:
		c.quietLocked(leapt, false)
		c.driveLocked()
	}
	c.keepalive.Reset(c.tickPeriod())
	if c.path != pathUp {
		return nil // the step found the path failed: a resume runs
	}
	return c.peerGoneLocked()
}

// tickLeap is how many periods after the last tick a tick may run and
// still count as on time. One that runs later follows a leap of the clock
// (a paused host) or a process starved of the CPU: the connection's quiet
// then says nothing about its traffic, and its rings stay as they are.
const tickLeap = 2

// quietLocked lets rings that moved no byte since the last Quiet shrink
// back (the step after it registers the smaller regions), unless the tick
// is late or found the peer silent: shrinking is housekeeping, and a host
// that has just thawed, or a connection whose peer does not answer, has
// better use for its time than to map, register, deregister and unmap.
func (c *Conn) quietLocked(leapt, silent bool) {
	if !leapt && !silent {
		c.eng.Quiet()
	}
}

// keepaliveLocked probes the peer. A peer gone without a word (its link
// down, its host dead) shows as sends that never complete; the transport's
// retries should end that with a failed completion, but some devices retry
// without limit (rxe takes retry_count 7 as "forever"), so the connection
// gives up once keepaliveProbes periods have passed without one send
// completion. It counts the time, not its ticks: a process that the
// device's resends keep from running (rxe resends in the host's kernel)
// runs its ticks late, and a count of them would stretch the bound by as
// much. It still waits for a second silent tick, a period after the
// first: a host whose clock leapt (a paused virtual machine) gives its
// device that period to resend before the peer is called gone.
func (c *Conn) keepaliveLocked(now time.Time, leapt bool) {
	c.driveLocked()
	if c.path != pathUp {
		return
	}
	alive := c.keepaliveProgressLocked()
	if alive {
		c.keepaliveStalls = 0
		c.keepaliveQuietSince = now
	} else {
		c.keepaliveStalls++
	}
	c.quietLocked(leapt, !alive)
	limit := keepaliveProbes
	if c.eng.PeerMayLackReceives() {
		limit = keepaliveProbesBusyPeer
	}
	if quiet := now.Sub(c.keepaliveQuietSince); quiet >= time.Duration(limit)*c.keepAlive && c.keepaliveStalls >= minSilentTicks {
		// Before giving up, take every completion the CQ holds: one the
		// bounded drive left behind, in a CQ shared with busier
		// connections, would be a live peer's.
		c.qp.CollectAll()
		c.driveLocked()
		switch {
		case c.path != pathUp:
			return
		case c.keepaliveProgressLocked():
			c.keepaliveStalls = 0
			c.keepaliveQuietSince = keepaliveNow()
		default:
			err := fmt.Errorf("%w: no acknowledgement for %v (%d keepalive periods of %v)",
				ring.ErrPeerGone, quiet.Round(time.Millisecond), limit, c.keepAlive)
			if c.resumableLocked(nil) {
				c.suspendLocked(CauseKeepalive, err)
				return
			}
			c.failLocked(err) // and tells the peer
			c.signalLocked()
			return
		}
	}
	c.eng.Keepalive()
	c.driveLocked()
}

// keepaliveProgressLocked reports whether the connection showed the peer
// alive since the last call: a send completed, or nothing was in flight to
// complete.
func (c *Conn) keepaliveProgressLocked() bool {
	done := c.eng.Stats().SendCompletions
	moved := c.eng.InFlight() == 0 || done != c.keepaliveSendsDone
	c.keepaliveSendsDone = done
	return moved
}

// TransportDisconnected is called when the connection manager reports the
// connection gone. If the peer said goodbye with DISCONNECT first, this is
// just the end of an orderly close; otherwise the peer vanished, or, on a
// connection that resumes, its path failed.
func (c *Conn) TransportDisconnected() { c.transportDisconnected(c.pathNumber()) }

// TransportFailed is called when the connection cannot go on, such as when
// its device is removed.
func (c *Conn) TransportFailed(err error) { c.transportFailed(c.pathNumber(), err) }

// pathNumber is the number of the path the connection is on now.
func (c *Conn) pathNumber() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pathNum
}

// transportDisconnected is TransportDisconnected of path, ignored unless
// it is the connection's path now and that path is not known failed.
func (c *Conn) transportDisconnected(path uint64) {
	c.mu.Lock()
	if path != c.pathNum || c.waitsForPathLocked() {
		c.mu.Unlock()
		return
	}
	if c.path == pathSwitching {
		// What arrived before the disconnect counts: both exchanges may
		// be done, with the peer's bytes and its DISCONNECT behind them
		// (a peer that closed as soon as it had resumed); switchTo
		// decides once it has polled everything.
		c.newPathDisconnected = c.newPathErr == nil
		c.newPathFailedLocked(fmt.Errorf("%w: the connection manager reported the new path gone", ring.ErrPeerGone))
		c.mu.Unlock()
		return
	}
	// Our queue pair goes to the error state first (and the peer's
	// disconnect request is answered): a peer that keeps sending after its
	// request, from a queue pair it never took down, then cannot keep the
	// drain, and this lock, busy. It is done under the lock so that no
	// step sees a flush before the drain has accounted everything that
	// arrived before it.
	c.qp.Disconnect()
	up := c.path == pathUp
	if up && c.set.Resumer != nil {
		c.path = pathDraining // the drain's flushes start no resume of their own
	}
	c.drainLocked() // account everything that arrived before the disconnect
	if up && c.set.Resumer != nil {
		c.path = pathUp
		if c.resumableLocked(nil) {
			// No DISCONNECT came first: the peer's side of the path failed.
			cause := fmt.Errorf("%w: the connection manager reported the connection gone without the peer's DISCONNECT", ring.ErrPeerGone)
			c.path = pathDraining
			c.eng.Fail(cause)
			c.suspendDrainedLocked(CauseTransport, cause)
			c.mu.Unlock()
			return
		}
	}
	c.transportDown = true
	if !c.eng.Finished() || c.eng.Err() != nil {
		// An error already there stays, unless it is a flush: the
		// disconnect is what caused that.
		c.eng.Fail(ring.ErrPeerGone)
	}
	var gone error
	if !c.closing {
		gone = c.peerGoneLocked()
	}
	c.forgetLater()
	c.signalLocked()
	c.kickLocked()
	c.mu.Unlock()
	c.tellPeerGone(gone)
}

// transportFailed is TransportFailed of path, ignored unless it is the
// connection's path now and that path is not known failed.
func (c *Conn) transportFailed(path uint64, err error) {
	c.mu.Lock()
	if path != c.pathNum || c.waitsForPathLocked() {
		c.mu.Unlock()
		return
	}
	if c.path == pathSwitching {
		c.newPathFailedLocked(err)
		c.mu.Unlock()
		return
	}
	if c.resumableLocked(nil) {
		c.suspendLocked(CauseTransport, err)
		c.mu.Unlock()
		return
	}
	c.transportDown = true
	c.failLocked(err)
	c.signalLocked()
	c.kickLocked()
	c.mu.Unlock()
}
