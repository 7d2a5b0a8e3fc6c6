package stream

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Conn drives one established connection: its engine over its queue pair,
// the goroutines and timers that keep it moving, and the calls of its user.
// Package rnet hands it out inside its own Conn handle, so that a handle
// nobody references can be collected even while the pusher, the keepalive
// timer and the transport's event goroutine still reference the Conn.
//
// All methods may be called concurrently. Concurrent Reads (and concurrent
// Writes) are serialised, so one Write's bytes are never interleaved with
// another's.
type Conn struct {
	// Set before the Conn is shared, read-only after.
	qp           QueuePair
	laddr, raddr net.Addr
	set          Settings
	softPosts    bool // the queue pair's device posts in software (see SoftwarePoster)

	// readMu serialises Reads. writeMu serialises the Writes that do not
	// fit the send ring at once; writing (set and read under mu, cleared
	// by writeMu's holder alone) says one of them is between its parts,
	// so that a Write that fits waits its turn too rather than come
	// between them.
	readMu, writeMu sync.Mutex
	writing         atomic.Bool

	// Under readMu: how long recent Reads waited for replies, for the
	// adaptive spin; replyRest says the last Read returned the start of a
	// reply, so the next wait is for its rest (see restWindow); streamSpin
	// decides whether a Read that does not wait for a reply spins at all.
	readWait   waitEstimate
	replyRest  bool
	streamSpin streamSpin

	// mu guards the engine and every field below it up to the channels:
	// what Read, Write, Close, the pusher and the timers share.
	mu    sync.Mutex
	eng   *ring.Engine
	sends []wr.Send // the work requests of the step under way
	recvs []wr.Recv
	wcs   []wr.Completion
	// lastPost is when a crossing last posted sends, on the monotonic
	// clock, read after it; on a device in software (softPosts), postCost
	// is how long the crossings that posted ring data took lately (see
	// corkWindow).
	lastPost time.Duration
	postCost time.Duration
	// wroteSinceRead says a Write came after the last Read that returned
	// data: the next wait is for a reply.
	wroteSinceRead bool
	readShut       bool  // CloseRead: inbound bytes are discarded
	closing        bool  // Close has begun: inbound bytes are discarded, calls fail
	transportDown  bool  // the transport reported the connection gone
	fatal          error // a failure the engine cannot see (a failed post, a removed device)
	drainBuf       []byte
	retiredRegions []ring.Region // serveRegionsLocked's reusable list
	polls          uint64        // crossings into C (Stats.CQPolls)
	spins          uint64        // waits that busy-polled (Stats.Spins)
	parks          uint64        // waits that parked (Stats.Parks)
	// The completion channel wait (see wait.go): waitOwned says someone
	// owns it, queued counts the blocked calls parked on their channels,
	// armed says every completion not yet polled has left an event.
	waitOwned bool
	queued    int
	armed     bool
	// pushing says the pusher (see wait.go) is, or is about to be, at
	// work.
	pushing bool
	// readied says this connection has woken one of its own goroutines
	// (the pusher, a queued caller) since a spinning caller last yielded:
	// the woken one may sit in the spinner's run queue (see busyPoll).
	readied bool
	// keepaliveStalls counts the keepalive ticks in a row that found sends
	// in flight and not one send completion since the tick before;
	// keepaliveSendsDone is the count of send completions the last tick saw.
	keepaliveStalls    int
	keepaliveSendsDone uint64
	keepalive          *time.Timer // keepalives and housekeeping, see tick

	// Wakeups, each with room for one pending signal so none is lost
	// between checking the engine and parking.
	readable   chan struct{}
	writable   chan struct{}
	changed    chan struct{} // anything happened: for Close's waits
	waitFree   chan struct{} // the completion channel wait is free to take
	pushWake   chan struct{} // starts the pusher
	pusherDone chan struct{}

	closed    chan struct{} // closed when Close begins
	closeOnce sync.Once
	closeErr  error // under closeOnce
	readDL    *Deadline
	writeDL   *Deadline
}

// Start drives an established engine over qp, and hands the connection out.
func Start(qp QueuePair, eng *ring.Engine, set Settings) *Conn {
	layout := eng.Layout()
	c := &Conn{
		qp:         qp,
		laddr:      qp.LocalAddr(),
		raddr:      qp.RemoteAddr(),
		set:        set,
		eng:        eng,
		sends:      make([]wr.Send, 0, layout.SendDepth),
		recvs:      make([]wr.Recv, 0, layout.RecvDepth),
		wcs:        make([]wr.Completion, CompletionBatch),
		readable:   make(chan struct{}, 1),
		writable:   make(chan struct{}, 1),
		changed:    make(chan struct{}, 1),
		waitFree:   make(chan struct{}, 1),
		pushWake:   make(chan struct{}, 1),
		pusherDone: make(chan struct{}),
		closed:     make(chan struct{}),
		readDL:     NewDeadline(qp.Kick),
		writeDL:    NewDeadline(qp.Kick),
	}
	if s, ok := qp.(SoftwarePoster); ok {
		c.softPosts = s.PostsInSoftware()
	}
	c.mu.Lock()
	c.driveLocked()
	c.mu.Unlock()
	qp.Start(c)
	go c.pusher()
	// Under c.mu: the timer's callback reads the field under c.mu, and
	// nothing else orders it after this write.
	c.mu.Lock()
	c.keepalive = time.AfterFunc(c.tickPeriod(), c.tick)
	c.mu.Unlock()
	return c
}

// Read: see rnet's Conn.Read. A Read that finds nothing spins for a window
// the spin policy (spin.go) gives it, then blocks; once data comes, it
// tells the policy how the wait went.
func (c *Conn) Read(b []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if len(b) == 0 {
		// As *net.TCPConn: nothing to wait for, so no deadline applies.
		if isClosed(c.closed) {
			return 0, c.opError("read", net.ErrClosed)
		}
		return 0, nil
	}
	var r readAttempt
	for {
		if isClosed(c.readDL.Wait()) {
			if isClosed(c.closed) {
				return 0, c.opError("read", net.ErrClosed)
			}
			c.uncork()
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
		c.mu.Lock()
		n, err := c.readLocked(b, &r)
		c.mu.Unlock()
		if n > 0 {
			c.endReadWait(&r)
			return n, nil
		}
		if err != nil {
			return 0, c.opError("read", err)
		}
		if !r.waiting {
			c.beginReadWait(&r)
			c.busyPoll(r.window, c.readReadyLocked, c.readDL.Wait(), r.reply)
			continue
		}
		r.blocked = true
		if r.measure && r.parkStart.IsZero() {
			r.parkStart = time.Now()
		}
		if c.block(c.readReadyLocked, c.readable, c.readDL.Wait(), c.closed) && r.measure {
			r.parked = true
		}
	}
}

// readAttempt is what one Read knows of its wait for data.
type readAttempt struct {
	waiting   bool          // the Read found nothing and began to wait
	reply     bool          // it waits for the answer to a Write
	start     time.Time     // when the wait began, if reply
	window    time.Duration // the spin window of the wait
	measure   bool          // a park in this wait measures a park's cost
	parkStart time.Time     // when the first block began, if measure
	parked    bool          // a block did park, if measure
	streamed  bool          // the wait spun under streamSpin's rule
	blocked   bool          // the spin ended without data, and the Read blocked
}

// readLocked is one look of a Read: it returns what the engine holds, or
// why nothing will come (io.EOF passes through opError bare). Finding
// nothing, it posts the bytes autocorking holds back, since the peer may
// wait for them before it answers.
func (c *Conn) readLocked(b []byte, r *readAttempt) (int, error) {
	if c.closing {
		return 0, net.ErrClosed
	}
	if c.readShut {
		return 0, io.EOF
	}
	n, err := c.eng.Read(b)
	if n > 0 {
		// Consuming may earn the peer a credit update: send it now.
		c.flushLocked()
		c.replyRest = c.wroteSinceRead
		c.wroteSinceRead = false
		return n, nil
	}
	if err == nil && c.fatal != nil {
		err = c.fatal
	}
	if !r.waiting {
		// What kind of wait this is is settled when it begins: a Write
		// while it waits does not make it a reply wait.
		r.reply = c.wroteSinceRead
	}
	if err == nil {
		c.uncorkLocked()
	}
	return 0, err
}

// beginReadWait gives a Read that found nothing its spin window. Only a
// Read that waits for the answer to our own Write (request and response)
// spins adaptively: a streaming reader's long spin would only take CPU
// from the writer, and it spins at all only while its spins catch data
// (streamSpin).
func (c *Conn) beginReadWait(r *readAttempt) {
	r.waiting = true
	switch {
	case r.reply:
		r.start = time.Now()
		r.window, r.measure = c.readWait.window(&c.set)
	case c.replyRest:
		r.window = c.readWait.restWindow(&c.set)
	default:
		r.window = c.streamSpin.window(c.set.BusyPoll)
		r.streamed = r.window > 0
	}
}

// endReadWait tells the spin policy how the wait of a Read that got data
// went.
func (c *Conn) endReadWait(r *readAttempt) {
	if r.waiting && r.reply {
		c.readWait.observe(time.Since(r.start), r.window, c.readWait.limit(&c.set))
		if r.parked {
			c.readWait.observePark(time.Since(r.parkStart))
		}
	}
	if r.streamed {
		c.streamSpin.observe(!r.blocked)
	}
}

// Write: see rnet's Conn.Write. A Write that fits the send ring now, and
// finds no other Write between its parts, goes in under mu alone and
// crosses into C from here, as most Writes do; writeMu is for those that
// must wait for room.
func (c *Conn) Write(b []byte) (int, error) {
	if isClosed(c.writeDL.Wait()) {
		return c.writeInParts(b)
	}
	c.mu.Lock()
	if c.writing.Load() || c.closing || c.fatal != nil || len(b) > c.eng.SendSpace() {
		c.mu.Unlock()
		return c.writeInParts(b)
	}
	n, mode, err := c.putLocked(b)
	if n > 0 {
		c.roundsLocked(mode, 0)
		c.finishStepLocked(mode)
	}
	c.mu.Unlock()
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

// putLocked copies what fits of b into the send ring, and says how the
// step that posts it looks at completions (see writeModeLocked).
func (c *Conn) putLocked(b []byte) (n int, mode stepMode, err error) {
	wasCorked := c.eng.Corked()
	n, err = c.eng.Write(b)
	if n > 0 {
		c.wroteSinceRead = true
		mode = c.writeModeLocked(n, wasCorked)
	}
	return n, mode, err
}

// writeInParts writes b as room in the send ring allows, holding writeMu
// throughout.
func (c *Conn) writeInParts(b []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	// Cleared without mu: the last part went in under mu already, and
	// taking mu here would deadlock a Write that panics while holding it.
	defer c.writing.Store(false)
	written := 0
	spun := false
	for {
		if isClosed(c.writeDL.Wait()) {
			if isClosed(c.closed) {
				return written, c.opError("write", net.ErrClosed)
			}
			c.uncork()
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
		c.writing.Store(true)
		n, mode, err := c.putLocked(b[written:])
		if n > 0 {
			c.stepLocked(mode, 0)
		}
		written += n
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
			c.busyPoll(c.set.BusyPoll, c.eng.Writable, c.writeDL.Wait(), false)
			continue
		}
		c.block(c.writeReadyLocked, c.writable, c.writeDL.Wait(), c.closed)
	}
}

// LocalAddr: see rnet's Conn.LocalAddr.
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr: see rnet's Conn.RemoteAddr.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline: see rnet's Conn.SetDeadline.
func (c *Conn) SetDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return c.opError("set", net.ErrClosed)
	}
	c.readDL.Set(t)
	c.writeDL.Set(t)
	return nil
}

// SetReadDeadline: see rnet's Conn.SetReadDeadline.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return c.opError("set", net.ErrClosed)
	}
	c.readDL.Set(t)
	return nil
}

// SetWriteDeadline: see rnet's Conn.SetWriteDeadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return c.opError("set", net.ErrClosed)
	}
	c.writeDL.Set(t)
	return nil
}
