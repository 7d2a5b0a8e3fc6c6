package stream

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"

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
	laddr, raddr net.Addr
	set          Settings
	softPosts    bool // the queue pair's device posts in software (see SoftwarePoster)

	// readMu serialises Reads. writeMu serialises the Writes that do not
	// fit the send ring at once; writing (set and read under mu, cleared
	// by writeMu's holder alone) says one of them is between its parts,
	// so that a Write that fits waits its turn too rather than come
	// between them.
	readMu, writeMu lockcount.Mutex
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
	mu lockcount.Mutex
	// qp and eng carry the stream; a resume replaces both (resume.go).
	// kickTo is qp for Kick and for the spin, which need no lock
	// (deadlines, the linger, busyPoll's SpinSharer).
	qp     QueuePair
	eng    *ring.Engine
	kickTo atomic.Pointer[QueuePair]
	sends  []wr.Send // the work requests of the step under way
	recvs  []wr.Recv
	wcs    []wr.Completion
	// The resume (resume.go): path says where the connection stands
	// with its path, pathNum counts the paths it moved to (events of
	// earlier ones are ignored); while a resume runs, resumeCancel ends
	// it, resumeDone is closed when its goroutine returns, and oldEng is
	// the engine a switch takes over from. resumeFailed says a resume
	// gave up; forgetting that Forget is on its way; retiredQPs are old
	// queue pairs a loan keeps from their destruction.
	path         pathState
	pathNum      uint64
	resumeCancel context.CancelFunc
	resumeDone   chan struct{}
	resumeStart  time.Time
	resumeKind   ResumeCause
	resumeCause  error
	resumeFailed bool
	// resumeAbandoned: Close ends the connection's resumes (see
	// endResume); until then a closing connection still resumes.
	resumeAbandoned bool
	oldEng          *ring.Engine
	newPathErr      error // a transport event of the new path, while switching
	// newPathDisconnected says newPathErr is the new path's disconnect:
	// if both exchanges were done before it, the switch takes over and
	// delivers it again.
	newPathDisconnected bool
	forgetting          bool
	retiredQPs          []QueuePair
	resumeStats         ResumeStats
	resumeStarts        []time.Time // when the resumes within MaxResumes' window started
	// Writes while the path is down (see holdWriteLocked): heldWrites
	// waits for the engine that takes over, up to heldRoom bytes, and
	// closeWriteLater says a CloseWrite came meanwhile; writeShut says
	// CloseWrite was called.
	heldWrites      []byte
	heldRoom        int
	closeWriteLater bool
	writeShut       bool
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
	peerGoneTold   bool  // the Observer heard that the peer vanished (see peergone.go)
	drainBuf       []byte
	retiredRegions []ring.Region // serveRegionsLocked's reusable list
	polls          uint64        // crossings into C (Stats.CQPolls)
	spins          uint64        // waits that busy-polled (Stats.Spins)
	parks          uint64        // waits that parked (Stats.Parks)
	spinsDeferred  uint64        // spins left to another connection's caller (Stats.SpinsDeferred)
	spinsLeft      uint64        // spins ended for other connections' work (Stats.SpinsLeft)
	handOffs       uint64        // the wait passed to a queued call or the pusher (Stats.HandOffs)
	// Ring memory lent to ReadFrom or WriteTo (see lend.go): lends counts
	// the loans running with mu released, recvLent says one holds
	// received bytes (nothing else may consume them), and while any runs
	// the regions the engine retires wait in lentRegions, and a Close
	// leaves the queue pair's destruction to the last loan (destroyLate).
	lends       int
	recvLent    bool
	lentRegions []ring.Region
	destroyLate bool
	// The completion channel wait (see wait.go): waitOwned says someone
	// owns it, queued counts the blocked calls parked on their channels,
	// armed says every completion not yet polled has left an event.
	waitOwned bool
	queued    int
	armed     bool
	// pushing says the pusher (see wait.go) is, or is about to be, at
	// work.
	pushing bool
	// sendsNeeded is what the queue pair was last told of our need for
	// send completions (see updateSendsNeededLocked).
	sendsNeeded bool
	// readied says this connection has woken one of its own goroutines
	// (the pusher, a queued caller) since a spinning caller last yielded:
	// the woken one may sit in the spinner's run queue (see busyPoll).
	readied bool
	// keepaliveStalls counts the keepalive ticks in a row that found sends
	// in flight and not one send completion since the tick before;
	// keepaliveSendsDone is the count of send completions the last tick
	// saw, keepaliveQuietSince when a tick last saw the peer alive, and
	// lastTick when the last tick ran (see tickLeap).
	keepaliveStalls     int
	keepaliveSendsDone  uint64
	keepaliveQuietSince time.Time
	lastTick            time.Time
	keepalive           *time.Timer // keepalives and housekeeping, see tick
	// keepAlive and linger are Settings.KeepAlive (off unless positive)
	// and Settings.Linger as SetKeepAlive and SetLinger last changed them;
	// keepAlivePeriod is the period SetKeepAlive turns keepalives on at.
	keepAlive       time.Duration
	keepAlivePeriod time.Duration
	linger          time.Duration

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
	// forgetOnce calls the Resumer's Forget once (see forget).
	forgetOnce sync.Once
	readDL     *Deadline
	writeDL    *Deadline
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

// opError is OpError for this connection's addresses.
func (c *Conn) opError(op string, err error) error {
	return OpError(op, c.laddr, c.raddr, err)
}
