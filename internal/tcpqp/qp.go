package tcpqp

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Options configure a QP.
type Options struct {
	// LocalAddr and RemoteAddr are what LocalAddr and RemoteAddr report;
	// nil means the TCP connection's own.
	LocalAddr, RemoteAddr net.Addr
	// SendDepth and RecvDepth bound the sends outstanding and the receives
	// posted (take them from ring.Layout); a post beyond fails, as on a
	// full queue. 0 means the depth of the default ring.Config.
	SendDepth, RecvDepth int
	// UserTimeout is set as TCP_USER_TIMEOUT on the socket in Start: data
	// left unacknowledged that long fails the path. 0 means 10 s.
	UserTimeout time.Duration
}

// DefaultUserTimeout is Options.UserTimeout when it is 0.
const DefaultUserTimeout = 10 * time.Second

// Errors of Step, AddRegion and Destroy.
var (
	errQueueFull     = errors.New("tcpqp: work queue full")
	errInvalidWR     = errors.New("tcpqp: invalid work request")
	errDestroyed     = errors.New("tcpqp: queue pair destroyed")
	errNotRegistered = errors.New("tcpqp: region not registered")
)

// QP is a stream.QueuePair over a TCP connection: see the package doc.
type QP struct {
	conn         *net.TCPConn
	laddr, raddr net.Addr
	sendDepth    int
	recvDepth    int
	userTimeout  time.Duration

	notify  chan struct{} // capacity 1: a completion, a frame or an error came
	kicked  chan struct{} // capacity 1: Kick
	wake    chan struct{} // capacity 1: frames wait for the writer
	room    chan struct{} // capacity 1: Step took frames off the inbound queue
	evReady chan struct{} // capacity 1: an event is set

	stop       chan struct{} // closed by Shutdown or Destroy
	stopOnce   sync.Once
	done       chan struct{} // closed by Destroy: the goroutines end
	eventsDone chan struct{} // closed when the event goroutine has ended
	readerDone chan struct{} // closed when the reader has ended
	wg         sync.WaitGroup

	// mu guards everything below. It is held only briefly, never across
	// I/O or a call to the handler; Step takes it under the connection's
	// lock, so it is the innermost lock.
	mu        sync.Mutex
	started   bool
	stopped   bool // Shutdown or Destroy was called
	destroyed bool
	qpErr     bool // the error state: see enterErrorLocked

	// event is the one transport event to deliver: nil error for
	// TransportDisconnected. evSet says it is taken.
	evSet bool
	event error

	mem      memory              // registered regions
	recvQ    fifo[wr.Recv]       // posted receives, oldest first
	cq       fifo[wr.Completion] // completions not yet handed over
	late     fifo[wr.Completion] // the error state's, handed over after the frames before it
	sendsOut int                 // sends posted and not yet completed (see pollLocked)
	inbound  fifo[frame]         // frames read, not yet landed
	inBytes  int                 // their size, headers included
	pool     bufPool             // payload buffers of landed frames
	out      []byte              // frames posted, not yet taken by the writer
	pending  []sendRec           // their sends
	writing  []sendRec           // the sends of the batch being written
	spare    []byte              // the writer's last buffer, for reuse
}

// sendRec is what a send's completion needs once its frame is written.
type sendRec struct {
	id       uint64
	op       wr.Opcode
	signaled bool
}

// New returns a queue pair over c. No I/O starts until Start: until then
// the socket belongs to the caller's handshake.
func New(c *net.TCPConn, opts Options) *QP {
	def := ring.Config{}.Layout()
	q := &QP{
		conn:        c,
		laddr:       opts.LocalAddr,
		raddr:       opts.RemoteAddr,
		sendDepth:   opts.SendDepth,
		recvDepth:   opts.RecvDepth,
		userTimeout: opts.UserTimeout,
		notify:      make(chan struct{}, 1),
		kicked:      make(chan struct{}, 1),
		wake:        make(chan struct{}, 1),
		room:        make(chan struct{}, 1),
		evReady:     make(chan struct{}, 1),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
		eventsDone:  make(chan struct{}),
		readerDone:  make(chan struct{}),
	}
	q.mem.init()
	if q.laddr == nil {
		q.laddr = c.LocalAddr()
	}
	if q.raddr == nil {
		q.raddr = c.RemoteAddr()
	}
	if q.sendDepth <= 0 {
		q.sendDepth = def.SendDepth
	}
	if q.recvDepth <= 0 {
		q.recvDepth = def.RecvDepth
	}
	if q.userTimeout <= 0 {
		q.userTimeout = DefaultUserTimeout
	}
	return q
}

// NewEngine makes an engine configured by cfg over q, with its rings
// registered there and its first receives posted: they must be on the
// queue before the peer can send, so before Start.
func NewEngine(cfg ring.Config, q *QP) (*ring.Engine, error) {
	layout := cfg.Layout()
	var regs [3]ring.Region
	kinds := [3]ring.RegionKind{ring.RegionSend, ring.RegionRecv, ring.RegionRecv}
	sizes := [3]int{layout.SendRegion, layout.RecvRegion, layout.TargetRegion}
	release := func(n int) {
		for _, r := range regs[:n] {
			q.RemoveRegion(r)
		}
	}
	for i := range regs {
		r, err := q.AddRegion(kinds[i], sizes[i])
		if err != nil {
			release(i)
			return nil, err
		}
		regs[i] = r
	}
	eng, err := ring.New(cfg, regs[0], regs[1], regs[2])
	if err != nil {
		release(len(regs))
		return nil, err
	}
	if _, err := q.Step(0, eng.PostRecvs(nil), nil, nil, 1); err != nil {
		release(len(regs))
		return nil, err
	}
	return eng, nil
}

// signal wakes Wait; it never blocks.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Wait parks until a completion may be ready, Kick is called, or the queue
// pair is shut down (net.ErrClosed).
func (q *QP) Wait() (parked bool, err error) {
	select {
	case <-q.stop:
		return false, net.ErrClosed
	case <-q.notify:
		return false, nil
	case <-q.kicked:
		return false, nil
	default:
	}
	select {
	case <-q.stop:
		return true, net.ErrClosed
	case <-q.notify:
		return true, nil
	case <-q.kicked:
		return true, nil
	}
}

// Kick makes the current or next Wait return.
func (q *QP) Kick() { signal(q.kicked) }

// Collected reports that frames or completions wait for a step.
func (q *QP) Collected() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cq.len() > 0 || q.inbound.len() > 0 || q.qpErr && q.late.len()+q.recvQ.len() > 0
}

// CollectAll does nothing: Step always hands over everything queued.
func (q *QP) CollectAll() {}

// NeedSends does nothing: every completion wakes Wait.
func (q *QP) NeedSends(bool) {}

// PostsInSoftware reports false: a post returns before the frame is sent.
func (q *QP) PostsInSoftware() bool { return false }

// TrySpin reports false, so that no caller busy-polls this queue pair
// (stream.SpinSharer): the peer's frames and the sends' completions come
// from this process's own reader and writer goroutines, which a spinner
// would keep from the CPU they need. With a hundred connections resumed
// over TCP, their readers' spins held both CPUs of a lab host and the
// resumes' exchanges ran out of time (docs/performance.md).
func (q *QP) TrySpin() bool { return false }

// EndSpin does nothing: TrySpin allows no spin.
func (q *QP) EndSpin() {}

// SpinWokeOthers reports false: there is no spin.
func (q *QP) SpinWokeOthers() bool { return false }

// Transport names the path, as package rnet's Conn.Info reports it.
func (q *QP) Transport() string { return "TCP" }

func (q *QP) LocalAddr() net.Addr  { return q.laddr }
func (q *QP) RemoteAddr() net.Addr { return q.raddr }

// Start sets the socket's options, starts reading and writing it, and
// delivers at most one transport event to h until Shutdown.
func (q *QP) Start(h interface {
	TransportDisconnected()
	TransportFailed(err error)
}) {
	q.mu.Lock()
	if q.started || q.stopped || q.destroyed {
		q.mu.Unlock()
		return
	}
	q.started = true
	q.mu.Unlock()
	if err := q.setSockopts(); err != nil {
		q.fail(fmt.Errorf("tcpqp: set socket options on the connection to %v: %w", q.raddr, err))
	}
	q.wg.Add(3)
	go q.events(h)
	go q.reader()
	go q.writer()
	signal(q.wake) // sends posted before Start go out now
}

// setSockopts makes a stalled path fail within the user timeout, sends
// small frames (credit updates) at once, and drops any deadline the
// handshake left, which would fail the path at a random moment.
func (q *QP) setSockopts() error {
	return errors.Join(q.conn.SetDeadline(time.Time{}), q.conn.SetNoDelay(true),
		q.conn.SetKeepAlive(true), setUserTimeout(q.conn, q.userTimeout))
}

// events delivers the one event, unless Shutdown comes first.
func (q *QP) events(h interface {
	TransportDisconnected()
	TransportFailed(err error)
}) {
	defer q.wg.Done()
	defer close(q.eventsDone)
	select {
	case <-q.evReady:
	case <-q.stop:
		return
	}
	select {
	case <-q.stop:
		return
	default:
	}
	q.mu.Lock()
	err := q.event
	q.mu.Unlock()
	if err == nil {
		h.TransportDisconnected()
	} else {
		h.TransportFailed(err)
	}
}

// raiseLocked sets the transport event, unless one is set already; err nil
// means the peer disconnected.
func (q *QP) raiseLocked(err error) {
	if q.evSet {
		return
	}
	q.evSet, q.event = true, err
	signal(q.evReady)
}

// fail moves the queue pair to the error state and fails the transport
// with err.
func (q *QP) fail(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.enterErrorLocked()
	q.raiseLocked(err)
}

// Disconnect moves the queue pair to the error state and tells the peer:
// the writer stops, and closes the write side (a FIN).
func (q *QP) Disconnect() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.enterErrorLocked()
}

// Shutdown fails Wait for good and stops event delivery; it returns once
// no handler call runs.
func (q *QP) Shutdown() {
	q.stopOnce.Do(func() { close(q.stop) })
	q.mu.Lock()
	q.stopped = true
	started := q.started
	q.mu.Unlock()
	if started {
		<-q.eventsDone
	}
}

// Destroy closes the socket, waits for every goroutine of the queue pair
// to end and forgets its regions. A second call returns an error. Once
// started, it closes only after the peer's FIN, or closeDrainBound after
// sending ours: a socket closed with the peer's bytes unread resets the
// connection, and the peer's kernel then drops what it had received from
// us and not yet read, frames whose sends had completed here. Meanwhile
// the reader drops what it reads.
func (q *QP) Destroy() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return errDestroyed
	}
	q.destroyed, q.stopped = true, true
	q.enterErrorLocked() // the writer sends our FIN
	started := q.started
	q.mu.Unlock()
	q.stopOnce.Do(func() { close(q.stop) })
	if started {
		drain := time.NewTimer(closeDrainBound)
		select {
		case <-q.readerDone:
		case <-drain.C:
		}
		drain.Stop()
	}
	close(q.done)
	err := q.conn.Close()
	q.wg.Wait()
	q.mu.Lock()
	q.mem.clear()
	for q.inbound.len() > 0 {
		q.inbound.pop()
	}
	q.inBytes = 0
	q.pool = bufPool{}
	q.out, q.spare = nil, nil
	q.mu.Unlock()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// closeDrainBound is the longest Destroy waits for the peer's FIN: an rnet
// peer sends it as soon as it reads ours; a peer that has gone silent
// costs the Close this much.
const closeDrainBound = time.Second

// enterErrorLocked moves the queue pair to the error state: every send not
// yet written completes with WCWRFlushErr, and the writer stops. These
// completions, and the receives' flushes, are handed over by pollLocked
// after the frames that arrived before the error, as a device's CQ holds
// those first.
func (q *QP) enterErrorLocked() {
	if q.qpErr {
		return
	}
	q.qpErr = true
	for _, s := range q.writing {
		q.flushSendLocked(s)
	}
	for _, s := range q.pending {
		q.flushSendLocked(s)
	}
	q.writing, q.pending, q.out = q.writing[:0], q.pending[:0], q.out[:0]
	signal(q.wake)
	signal(q.room)
	signal(q.notify)
}

func (q *QP) flushSendLocked(s sendRec) {
	q.late.push(wr.Completion{ID: s.id, Status: wr.WCWRFlushErr, Opcode: sendWCOpcode(s.op)})
}

func sendWCOpcode(op wr.Opcode) wr.WCOpcode {
	if op == wr.OpSend || op == wr.OpSendImm {
		return wr.WCSend
	}
	return wr.WCRDMAWrite
}
