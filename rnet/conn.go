package rnet

import (
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Conn is one RDMA stream connection. It implements net.Conn, and like
// *net.TCPConn it also has CloseWrite and CloseRead.
//
// All methods may be called concurrently. Concurrent Reads (and concurrent
// Writes) are serialised, so one Write's bytes are never interleaved with
// another's.
//
// A Conn that is no longer referenced anywhere is closed when the garbage
// collector finds it, as a *net.TCPConn's socket is, so that a forgotten
// Close does not hold a queue pair and its registered memory for the life
// of the process. Do not rely on it: a collection may come late or never,
// and queue pairs are scarcer than file descriptors. Close the Conn.
type Conn struct {
	_       noCopy
	conn    *conn
	cleanup runtime.Cleanup
}

// noCopy makes go vet's copylocks check report a copied handle: a copy
// would be closed when the original is collected.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// newHandle hands c out. The connection's own goroutines and timers
// reference c, never the handle, so the handle can become unreachable while
// they run; its cleanup then closes c. Every method that reaches c keeps the
// handle alive until it returns, so that a Read blocked on a Conn that the
// caller no longer mentions is not closed under it.
func newHandle(c *conn) *Conn {
	h := &Conn{conn: c}
	// Close may wait up to Linger, and cleanups share one goroutine.
	h.cleanup = runtime.AddCleanup(h, func(c *conn) { go c.Close() }, c)
	return h
}

// Read reads received bytes into b. It returns io.EOF once the peer has
// closed its side (CloseWrite or Close) and every byte before that was read.
func (h *Conn) Read(b []byte) (int, error) {
	n, err := h.conn.Read(b)
	runtime.KeepAlive(h)
	return n, err
}

// Write writes b to the connection. It returns once every byte has been
// copied into the send ring (it never keeps b), or with the count written so
// far when the write deadline passes or the connection fails.
func (h *Conn) Write(b []byte) (int, error) {
	n, err := h.conn.Write(b)
	runtime.KeepAlive(h)
	return n, err
}

// CloseWrite shuts down the sending side, like TCP's FIN: the peer reads
// io.EOF once it has read everything written before. Reading goes on.
func (h *Conn) CloseWrite() error {
	err := h.conn.CloseWrite()
	runtime.KeepAlive(h)
	return err
}

// CloseRead shuts down the receiving side: Read returns io.EOF, and bytes
// that arrive later are discarded (the peer is not told, as with TCP).
func (h *Conn) CloseRead() error {
	err := h.conn.CloseRead()
	runtime.KeepAlive(h)
	return err
}

// Close sends what was written (waiting up to Config.Linger for the peer's
// credits), tells the peer with rsocket's DISCONNECT, and releases the queue
// pair, the rings and the connection's goroutines. Blocked Reads and Writes
// return net.ErrClosed.
func (h *Conn) Close() error {
	h.cleanup.Stop()
	err := h.conn.Close()
	runtime.KeepAlive(h)
	return err
}

// LocalAddr returns the local address, an *Addr.
func (h *Conn) LocalAddr() net.Addr { return h.conn.LocalAddr() }

// RemoteAddr returns the peer's address, an *Addr.
func (h *Conn) RemoteAddr() net.Addr { return h.conn.RemoteAddr() }

// SetDeadline sets the read and write deadlines, as net.Conn documents.
func (h *Conn) SetDeadline(t time.Time) error {
	err := h.conn.SetDeadline(t)
	runtime.KeepAlive(h)
	return err
}

// SetReadDeadline sets the deadline for Read; a past one wakes a blocked Read.
func (h *Conn) SetReadDeadline(t time.Time) error {
	err := h.conn.SetReadDeadline(t)
	runtime.KeepAlive(h)
	return err
}

// SetWriteDeadline sets the deadline for Write; a past one wakes a blocked
// Write.
func (h *Conn) SetWriteDeadline(t time.Time) error {
	err := h.conn.SetWriteDeadline(t)
	runtime.KeepAlive(h)
	return err
}

// Config returns the settings this connection runs with: the Config it was
// made with, every default applied, queue depths as the device allowed and
// the inline size it granted. A feature that is off shows as a negative
// value. The transport's fields (AckTimeout, RetryCount, RNRRetryCount,
// TrafficClass) stay zero: Info reports what the queue pair holds.
func (h *Conn) Config() Config {
	cfg := h.conn.effectiveConfig()
	runtime.KeepAlive(h)
	return cfg
}

// Stats returns a snapshot of the connection's counters.
func (h *Conn) Stats() Stats {
	s := h.conn.Stats()
	runtime.KeepAlive(h)
	return s
}

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
	mu       sync.Mutex
	eng      *ring.Engine
	sends    []wr.Send
	recvs    []wr.Recv
	wcs      []wr.Completion
	reapless bool // this step posts without polling (postWriteLocked)
	// lastPost is when a crossing last posted sends, on the monotonic
	// clock, read after it; on a device in software (softPosts), postCost
	// is how long the crossings that posted ring data took lately (see
	// corkWindow).
	lastPost  time.Duration
	postCost  time.Duration
	softPosts bool
	readShut  bool  // CloseRead: inbound bytes are discarded
	closing   bool  // Close has begun: inbound bytes are discarded, calls fail
	transDown bool  // the transport reported the connection gone
	fatal     error // a failure the engine cannot see (a failed post, a removed device)
	drainBuf  []byte
	polls     uint64
	// retiredRegions is serveRegionsLocked's reusable list.
	retiredRegions []ring.Region
	spins          uint64 // waits that busy-polled (Stats.Spins)
	parks          uint64 // waits that parked (Stats.Parks)

	// readMu serializes Reads. writeMu serializes the Writes that do not
	// fit the send ring at once; writing (set and read under mu, cleared
	// by writeMu's holder alone) says one of them is between its parts,
	// so that a Write that fits waits its turn too rather than come
	// between them.
	readMu, writeMu sync.Mutex
	writing         atomic.Bool

	// The completion channel wait (see wait.go): waitOwned says someone
	// owns it, queued counts the blocked calls parked on their channels,
	// armed says every completion not yet polled has left an event.
	waitOwned bool
	queued    int
	armed     bool
	// spinning says the caller stepping the engine busy-polls: its polls
	// may repeat inside the crossing (see spinPollTries).
	spinning bool
	// pushing says the pusher (see wait.go) is, or is about to be, at
	// work; pushWake starts it.
	pushing    bool
	pushWake   chan struct{}
	pusherDone chan struct{}
	// readied says this connection has woken one of its own goroutines
	// (the pusher, a queued caller) since a spinning caller last yielded:
	// the woken one may sit in the spinner's run queue (see busyPoll).
	readied bool

	// Wakeups, each with room for one pending signal so none is lost
	// between checking the engine and parking.
	readable chan struct{}
	writable chan struct{}
	changed  chan struct{} // anything happened: for Close's waits
	waitFree chan struct{} // the completion channel wait is free to take

	closed    chan struct{} // closed when Close begins
	closeOnce sync.Once
	closeErr  error
	readDL    *deadline
	writeDL   *deadline
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

// newConn starts driving an established engine over qp, and hands it out.
func newConn(qp queuePair, eng *ring.Engine, set settings) *Conn {
	return newHandle(startConn(qp, eng, set))
}

// startConn starts driving an established engine over qp.
func startConn(qp queuePair, eng *ring.Engine, set settings) *conn {
	layout := eng.Layout()
	c := &conn{
		qp:         qp,
		laddr:      qp.LocalAddr(),
		raddr:      qp.RemoteAddr(),
		set:        set,
		eng:        eng,
		sends:      make([]wr.Send, 0, layout.SendDepth),
		recvs:      make([]wr.Recv, 0, layout.RecvDepth),
		wcs:        make([]wr.Completion, completionBatch),
		readable:   make(chan struct{}, 1),
		writable:   make(chan struct{}, 1),
		changed:    make(chan struct{}, 1),
		waitFree:   make(chan struct{}, 1),
		pushWake:   make(chan struct{}, 1),
		pusherDone: make(chan struct{}),
		closed:     make(chan struct{}),
		readDL:     newDeadline(qp.Kick),
		writeDL:    newDeadline(qp.Kick),
	}
	if s, ok := qp.(softwarePoster); ok {
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
			c.uncork()
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
		if err == nil {
			c.uncorkLocked() // the peer may wait for them before it answers
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
				window, measure = c.readWait.window(&c.set)
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
	if n, done, err := c.writeWhole(b); done {
		return n, err
	}
	return c.writeInParts(b)
}

// writeWhole writes all of b under mu alone if it fits the send ring now
// and no other Write is between its parts, as most Writes do: writeMu is
// for those that must wait for room. done says it wrote.
func (c *conn) writeWhole(b []byte) (n int, done bool, err error) {
	if isClosed(c.writeDL.wait()) {
		return 0, false, nil
	}
	c.mu.Lock()
	if c.writing.Load() || c.closing || c.fatal != nil || len(b) > c.eng.SendSpace() {
		c.mu.Unlock()
		return 0, false, nil
	}
	n, err = c.writeLocked(b)
	c.mu.Unlock()
	if err != nil {
		return n, true, c.opError("write", err)
	}
	return n, true, nil
}

// writeLocked puts what fits of b in the send ring and posts it, or corks
// it.
func (c *conn) writeLocked(b []byte) (int, error) {
	wasCorked := c.eng.Corked()
	n, err := c.eng.Write(b)
	if n > 0 {
		c.wroteSinceRead = true
		c.postWriteLocked(n, wasCorked)
	}
	return n, err
}

// writeInParts writes b as room in the send ring allows, holding writeMu
// throughout.
func (c *conn) writeInParts(b []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	// Cleared without mu: the last part went in under mu already, and
	// taking mu here would deadlock a Write that panics while holding it.
	defer c.writing.Store(false)
	written := 0
	spun := false
	for {
		if isClosed(c.writeDL.wait()) {
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
		n, err := c.writeLocked(b[written:])
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
			c.busyPoll(c.set.busyPoll, c.eng.Writable, c.writeDL.wait(), false)
			continue
		}
		c.block(c.writeReadyLocked, c.writable, c.writeDL.wait(), c.closed)
	}
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
