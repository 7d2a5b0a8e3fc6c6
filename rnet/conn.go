package rnet

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// Conn is one RDMA stream connection. It implements net.Conn, and like
// *net.TCPConn it also has CloseWrite and CloseRead.
//
// All methods may be called concurrently. Concurrent Reads (and concurrent
// Writes) are serialised, so one Write's bytes are never interleaved with
// another's.
type Conn struct {
	qp           queuePair
	laddr, raddr net.Addr
	set          settings

	// mu guards the engine and everything the progress loop shares with
	// Read, Write and Close.
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

	readMu, writeMu sync.Mutex

	// Wakeups, each with room for one pending signal so none is lost
	// between checking the engine and parking.
	readable chan struct{}
	writable chan struct{}
	changed  chan struct{} // anything happened: for Close's waits

	closed    chan struct{} // closed when Close begins
	closeOnce sync.Once
	closeErr  error
	loopDone  chan struct{}
	readDL    deadline
	writeDL   deadline
	keepalive *time.Timer
	// Keepalive ticks in a row that found sends in flight and not one
	// send completion since the previous tick, and that count then.
	kaStalled  int
	kaSendDone uint64
}

// keepaliveProbes is how many keepalive periods in a row sends may stay
// unacknowledged before the peer is declared gone, like TCP's keepalive
// probe count.
const keepaliveProbes = 3

// completionBatch is how many completions one poll of the CQ moves, in one
// crossing into C.
const completionBatch = 64

// newConn starts driving an established engine over qp.
func newConn(qp queuePair, eng *ring.Engine, set settings) *Conn {
	layout := eng.Layout()
	c := &Conn{
		qp:       qp,
		laddr:    qp.localAddr(),
		raddr:    qp.remoteAddr(),
		set:      set,
		eng:      eng,
		sends:    make([]ring.SendWR, 0, layout.SendDepth),
		recvs:    make([]ring.RecvWR, 0, layout.RecvDepth),
		wcs:      make([]ring.Completion, completionBatch),
		readable: make(chan struct{}, 1),
		writable: make(chan struct{}, 1),
		changed:  make(chan struct{}, 1),
		closed:   make(chan struct{}),
		loopDone: make(chan struct{}),
		readDL:   newDeadline(),
		writeDL:  newDeadline(),
	}
	c.mu.Lock()
	c.driveLocked()
	c.mu.Unlock()
	qp.start(c)
	go c.progressLoop()
	if set.keepAlive > 0 {
		// Under c.mu: the timer's callback reads the field under c.mu, and
		// nothing else orders it after this write.
		c.mu.Lock()
		c.keepalive = time.AfterFunc(set.keepAlive, c.sendKeepalive)
		c.mu.Unlock()
	}
	return c
}

// progressLoop is the connection's one goroutine. It parks in the netpoller
// until the completion queue has news, then lets the engine account it, so
// credits and acknowledgements flow even while nobody calls Read or Write.
func (c *Conn) progressLoop() {
	defer close(c.loopDone)
	for {
		// Arm before polling: a completion that lands after the poll
		// then still wakes wait.
		if err := c.qp.arm(); err != nil {
			c.mu.Lock()
			c.failLocked(err)
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		c.driveLocked()
		c.mu.Unlock()
		if err := c.qp.wait(); err != nil {
			return
		}
	}
}

// driveLocked polls completions into the engine and posts whatever work the
// engine then has, until the CQ is empty, and wakes whoever can now proceed.
func (c *Conn) driveLocked() {
	for {
		n, err := c.qp.poll(c.wcs)
		c.polls++
		if err != nil {
			c.failLocked(err)
			break
		}
		if n > 0 {
			c.eng.Complete(c.wcs[:n]) // a fatal error is kept in eng.Err
		}
		if c.closing || c.readShut {
			c.discardInboundLocked()
		}
		if c.fatal == nil {
			// Receives go first: the engine only grants credits for
			// receives that are back on the queue.
			if c.recvs = c.eng.PostRecvs(c.recvs[:0]); len(c.recvs) > 0 {
				if err := c.qp.postRecv(c.recvs); err != nil {
					c.failLocked(err)
				}
			}
		}
		if c.fatal == nil {
			if c.sends = c.eng.PostSends(c.sends[:0]); len(c.sends) > 0 {
				if err := c.qp.postSend(c.sends); err != nil {
					c.failLocked(err)
				}
			}
		}
		if n < len(c.wcs) || c.fatal != nil {
			break
		}
	}
	c.signalLocked()
}

// discardInboundLocked consumes received bytes nobody will read, so the peer
// keeps its credits and can go on reading what we still have to send.
func (c *Conn) discardInboundLocked() {
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

func (c *Conn) failLocked(err error) {
	if c.fatal == nil {
		c.fatal = err
		c.eng.Fail(err)
	}
}

func (c *Conn) signalLocked() {
	failed := c.fatal != nil || c.eng.Err() != nil
	if failed || c.eng.Readable() || c.readShut {
		notify(c.readable)
	}
	if failed || c.eng.Writable() {
		notify(c.writable)
	}
	notify(c.changed)
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// busyPoll drives the connection for up to the busy-poll window or until
// ready reports true, so a reply that is microseconds away does not cost a
// park and a wakeup through the completion channel.
func (c *Conn) busyPoll(ready func() bool) {
	if c.set.busyPoll <= 0 {
		return
	}
	end := time.Now().Add(c.set.busyPoll)
	for spin := 1; ; spin++ {
		c.mu.Lock()
		c.driveLocked()
		ok := ready() || c.fatal != nil || c.closing
		c.mu.Unlock()
		// Reading the clock costs more than a poll of the CQ: look at it
		// only every few spins.
		if ok || spin%8 == 0 && time.Now().After(end) {
			return
		}
	}
}

// Read reads received bytes into b. It returns io.EOF once the peer has
// closed its side (CloseWrite or Close) and every byte before that was read.
func (c *Conn) Read(b []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	spun := false
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
		if len(b) == 0 {
			c.mu.Unlock()
			return 0, nil
		}
		n, err := c.eng.Read(b)
		if n > 0 {
			// Consuming earns the peer credits: send them now.
			c.driveLocked()
			c.mu.Unlock()
			return n, nil
		}
		if err == nil && c.fatal != nil {
			err = c.fatal
		}
		c.mu.Unlock()
		if err != nil {
			return 0, c.opError("read", err)
		}
		if !spun {
			spun = true
			c.busyPoll(c.eng.Readable)
			continue
		}
		select {
		case <-c.readable:
		case <-c.readDL.wait():
		case <-c.closed:
		}
	}
}

// Write writes b to the connection. It returns once every byte has been
// copied into the send ring (it never keeps b), or with the count written so
// far when the write deadline passes or the connection fails.
func (c *Conn) Write(b []byte) (int, error) {
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
			c.driveLocked()
		}
		c.mu.Unlock()
		if err != nil {
			return written, c.opError("write", err)
		}
		if written == len(b) {
			return written, nil
		}
		if n > 0 {
			spun = false
		}
		if !spun {
			spun = true
			c.busyPoll(c.eng.Writable)
			continue
		}
		select {
		case <-c.writable:
		case <-c.writeDL.wait():
		case <-c.closed:
		}
	}
}

// CloseWrite shuts down the sending side, like TCP's FIN: the peer reads
// io.EOF once it has read everything written before. Reading goes on.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("close", net.ErrClosed)
	}
	c.eng.CloseWrite()
	c.driveLocked()
	return nil
}

// CloseRead shuts down the receiving side: Read returns io.EOF, and bytes
// that arrive later are discarded (the peer is not told, as with TCP).
func (c *Conn) CloseRead() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("close", net.ErrClosed)
	}
	c.readShut = true
	c.driveLocked()
	return nil
}

// Close sends what was written (waiting up to Config.Linger for the peer's
// credits), tells the peer with rsocket's DISCONNECT, and releases the queue
// pair, the rings and the connection's goroutine. Blocked Reads and Writes
// return net.ErrClosed.
func (c *Conn) Close() error {
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

func (c *Conn) close() error {
	c.mu.Lock()
	c.closing = true
	close(c.closed)
	c.driveLocked()
	c.mu.Unlock()
	if c.keepalive != nil {
		c.keepalive.Stop()
	}
	c.readDL.stop()
	c.writeDL.stop()

	linger := time.NewTimer(c.set.linger)
	defer linger.Stop()
	// First the data already written, like a TCP FIN after the send
	// buffer drains.
	sent := c.waitLocked(linger.C, func() bool {
		return c.eng.Flushed() || c.eng.Finished() || c.transDown || c.fatal != nil
	})
	c.mu.Lock()
	switch {
	case c.transDown || c.fatal != nil || c.eng.Err() != nil || c.eng.PeerDisconnected():
		// Nothing more can go out, or the peer is already gone.
	case sent:
		c.eng.Close()
	default:
		c.eng.Abort()
	}
	c.driveLocked()
	c.mu.Unlock()
	// Then our DISCONNECT, so the peer sees an orderly close rather than
	// a torn-down queue pair.
	c.waitLocked(linger.C, func() bool {
		return c.eng.Flushed() || c.transDown || c.fatal != nil || c.eng.Err() != nil
	})
	c.qp.disconnect()
	c.qp.shutdown()
	<-c.loopDone
	if err := c.qp.release(); err != nil {
		return c.opError("close", err)
	}
	return nil
}

// waitLocked waits until cond (called with c.mu held) holds or timeout fires.
func (c *Conn) waitLocked(timeout <-chan time.Time, cond func() bool) bool {
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-c.changed:
		case <-timeout:
			return false
		}
	}
}

func (c *Conn) sendKeepalive() {
	c.mu.Lock()
	if !c.closing && c.fatal == nil {
		// A peer that is gone without a word (its link down, its host
		// dead) shows as sends that never complete. The transport's
		// retries should end that with a failed completion, but some
		// devices retry without limit (rxe takes retry_count 7, which
		// rsocket and rnet use, as "forever"), so give up after
		// keepaliveProbes idle periods without a single send completion.
		done := c.eng.Stats().SendCompletions
		if c.eng.InFlight() > 0 && done == c.kaSendDone {
			c.kaStalled++
		} else {
			c.kaStalled = 0
		}
		c.kaSendDone = done
		if c.kaStalled >= keepaliveProbes {
			c.failLocked(fmt.Errorf("%w: no acknowledgement for %d keepalive periods of %v",
				ErrPeerGone, c.kaStalled, c.set.keepAlive))
			c.signalLocked()
		} else {
			c.eng.Keepalive()
			c.driveLocked()
		}
	}
	t := c.keepalive
	c.mu.Unlock()
	select {
	case <-c.closed:
	default:
		t.Reset(c.set.keepAlive)
	}
}

// transportDisconnected is called when the connection manager reports the
// connection gone. If the peer said goodbye with DISCONNECT first, this is
// just the end of an orderly close; otherwise the peer vanished.
func (c *Conn) transportDisconnected() {
	c.mu.Lock()
	c.driveLocked() // account what arrived before the disconnect
	c.transDown = true
	if !c.eng.Finished() {
		c.eng.Fail(ErrPeerGone)
	}
	c.signalLocked()
	c.mu.Unlock()
	// Answer the peer's disconnect request so its side completes promptly.
	c.qp.disconnect()
}

func (c *Conn) transportFailed(err error) {
	c.mu.Lock()
	c.transDown = true
	c.failLocked(err)
	c.signalLocked()
	c.mu.Unlock()
}

func (c *Conn) opError(op string, err error) error {
	return opError(op, c.laddr, c.raddr, err)
}

// LocalAddr returns the local address, an *Addr.
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address, an *Addr.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline sets the read and write deadlines, as net.Conn documents.
func (c *Conn) SetDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return c.opError("set", net.ErrClosed)
	}
	c.readDL.set(t)
	c.writeDL.set(t)
	return nil
}

// SetReadDeadline sets the deadline for Read; a past one wakes a blocked Read.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return c.opError("set", net.ErrClosed)
	}
	c.readDL.set(t)
	return nil
}

// SetWriteDeadline sets the deadline for Write; a past one wakes a blocked Write.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return c.opError("set", net.ErrClosed)
	}
	c.writeDL.set(t)
	return nil
}
