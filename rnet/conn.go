package rnet

import (
	"io"
	"net"
	"runtime"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/stream"
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
	conn    *stream.Conn
	cleanup runtime.Cleanup
	// handshakeTimeout is Config.HandshakeTimeout with its default, for
	// Config: the driver has no use for it.
	handshakeTimeout time.Duration
	// resume is the listener's agreement to resume the connection, on the
	// dialing side of a connection that agreed to the extension; nil
	// otherwise. Set before the handle is handed out.
	resume *resumeAgreement
	// resumeTimeout is Config.ResumeTimeout on either side of a
	// connection that agreed to the extension, 0 on one that did not.
	resumeTimeout time.Duration
}

// noCopy makes go vet's copylocks check report a copied handle: a copy
// would be closed when the original is collected.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// newConn starts driving an established engine over qp, and hands it out.
func newConn(qp stream.QueuePair, eng *ring.Engine, set settings) *Conn {
	return newHandle(stream.Start(qp, eng, set.streamSettings()), set.handshakeTimeout)
}

// newNegotiatedConn is newConn for a connection whose handshake negotiated
// the resume extension: agreed is the dialer's record of the agreement (nil
// on the listening side or without one), and resumer, if not nil, resumes
// the connection when its path fails; the stream tells it, by Forget, when
// the connection has ended for good. (The Observer's PeerGone is no such
// sign: it comes also of a path that failed while the connection resumes.)
func newNegotiatedConn(qp stream.QueuePair, eng *ring.Engine, set settings, agreed *resumeAgreement, resumer stream.Resumer) *Conn {
	ss := set.streamSettings()
	if resumer != nil {
		ss.Resumer, ss.ResumeTimeout = resumer, set.resumeTimeout
		ro := &resumeObserver{log: logFor(set.logger)}
		ss.Resumed, ss.ResumeFailed = ro.resumed, ro.resumeFailed
		if agreed == nil {
			// The listener's end waits for its dialer as long as its
			// table keeps the token: it may see the path fail first.
			ss.ResumeTimeout = resumeLifetime(set.resumeTimeout)
		}
		ss.KeepAlive = resumeKeepAlive(ss.KeepAlive, set.resumeTimeout)
	}
	h := newHandle(stream.Start(qp, eng, ss), set.handshakeTimeout)
	h.resume = agreed
	if agreed != nil || resumer != nil {
		h.resumeTimeout = set.resumeTimeout
	}
	return h
}

// resumeKeepAlive is the keepalive period of a connection that resumes:
// at most a third of ResumeTimeout (at least the least KeepAlive), so that a dialer that only receives
// finds a path the listener's end saw fail first (its probe fails after
// the transport's retries) well within the listener's wait of twice
// ResumeTimeout. Keepalives turned off stay off.
func resumeKeepAlive(keepAlive, resumeTimeout time.Duration) time.Duration {
	if keepAlive <= 0 {
		return keepAlive
	}
	return min(keepAlive, max(resumeTimeout/3, minKeepAlive))
}

// newHandle hands c out. The connection's own goroutines and timers
// reference c, never the handle, so the handle can become unreachable while
// they run; its cleanup then closes c. Every method that reaches c keeps the
// handle alive until it returns, so that a Read blocked on a Conn that the
// caller no longer mentions is not closed under it.
func newHandle(c *stream.Conn, handshakeTimeout time.Duration) *Conn {
	h := &Conn{conn: c, handshakeTimeout: handshakeTimeout}
	// Close may wait up to Linger, and cleanups share one goroutine.
	h.cleanup = runtime.AddCleanup(h, func(c *stream.Conn) { go c.Close() }, c)
	return h
}

// Read reads received bytes into b. It returns io.EOF once the peer has
// closed its side (CloseWrite or Close) and every byte before that was read.
func (h *Conn) Read(b []byte) (int, error) {
	n, err := h.conn.Read(b)
	runtime.KeepAlive(h)
	return n, exportError(err)
}

// Write writes b to the connection. It returns once every byte has been
// copied into the send ring (it never keeps b), or with the count written so
// far when the write deadline passes or the connection fails.
func (h *Conn) Write(b []byte) (int, error) {
	n, err := h.conn.Write(b)
	runtime.KeepAlive(h)
	return n, exportError(err)
}

// ReadFrom implements io.ReaderFrom, which io.Copy uses: it reads from r
// straight into the send ring, with no buffer between, until r returns
// io.EOF (ReadFrom then returns nil) or another error (returned as it is),
// or the connection fails. Bytes go out as Write's do (autocorking,
// credits); the write deadline and Close end it as they end a Write,
// though not a Read of r that blocks. r is read with none of the
// connection's locks held, into memory that is the send ring's: as io.Reader
// requires, r must not keep the slice it is given. A Close meanwhile
// returns at once, but the queue pair and the rings it pins are released
// only when r's Read returns.
func (h *Conn) ReadFrom(r io.Reader) (int64, error) {
	n, err := h.conn.ReadFrom(r)
	runtime.KeepAlive(h)
	return n, exportError(err)
}

// WriteTo implements io.WriterTo, which io.Copy uses: it hands w the
// received bytes straight from the receive ring, with no buffer between,
// until the peer closes its side (WriteTo then returns nil), w fails, or the
// connection does. The read deadline and Close end it as they end a Read.
// w is called with none of the connection's locks held, on memory that is
// the receive ring's: as io.Writer requires, w must not keep the slice it
// is given. Bytes count as read once w has taken them. A Close meanwhile
// returns at once, but the queue pair and the rings it pins are released
// only when w's Write returns.
func (h *Conn) WriteTo(w io.Writer) (int64, error) {
	n, err := h.conn.WriteTo(w)
	runtime.KeepAlive(h)
	return n, exportError(err)
}

// CloseWrite shuts down the sending side, like TCP's FIN: the peer reads
// io.EOF once it has read everything written before. Reading goes on.
func (h *Conn) CloseWrite() error {
	err := h.conn.CloseWrite()
	runtime.KeepAlive(h)
	return exportError(err)
}

// CloseRead shuts down the receiving side: Read returns io.EOF, and bytes
// that arrive later are discarded (the peer is not told, as with TCP).
func (h *Conn) CloseRead() error {
	err := h.conn.CloseRead()
	runtime.KeepAlive(h)
	return exportError(err)
}

// Close sends what was written (waiting up to Config.Linger for the peer's
// credits), tells the peer with rsocket's DISCONNECT, and releases the queue
// pair, the rings and the connection's goroutines. Blocked Reads and Writes
// return net.ErrClosed. On a connection that resumes (Config.Resume), a path
// that fails before the bytes written are acknowledged, or has failed, is
// resumed within the same Linger, so that they and the end of the stream
// still reach the peer; past Linger Close returns ErrAborted.
func (h *Conn) Close() error {
	h.cleanup.Stop()
	err := h.conn.Close()
	runtime.KeepAlive(h)
	return exportError(err)
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
// TrafficClass) stay zero: Info reports what the queue pair holds. Resume
// is true, with its ResumeTimeout, only if both ends agreed to it.
func (h *Conn) Config() Config {
	rc := h.conn.EngineConfig()
	set := h.conn.Settings()
	runtime.KeepAlive(h)
	offIfZero := func(d time.Duration) time.Duration {
		if d == 0 {
			return -1
		}
		return d
	}
	inline := rc.InlineThreshold
	if inline == ring.NoInline {
		inline = -1
	}
	limit := set.BusyPollLimit
	if set.BusyPoll == 0 || limit == 0 {
		limit = -1
	}
	return Config{
		SendBufferSize:   rc.SendBufferSize,
		RecvBufferSize:   rc.RecvBufferSize,
		IdleBufferSize:   rc.IdleBufferSize,
		SendQueueSize:    rc.SendQueueSize,
		RecvQueueSize:    rc.RecvQueueSize,
		InlineThreshold:  inline,
		BusyPoll:         offIfZero(set.BusyPoll),
		BusyPollLimit:    limit,
		KeepAlive:        offIfZero(set.KeepAlive),
		Linger:           offIfZero(set.Linger),
		HandshakeTimeout: offIfZero(h.handshakeTimeout),
		NoDelay:          noDelay(rc),
		Resume:           h.resumeTimeout != 0,
		ResumeTimeout:    h.resumeTimeout,
	}
}

// Stats returns a snapshot of the connection's counters.
func (h *Conn) Stats() Stats {
	s := statsOf(h.conn.Stats())
	if d, ok := h.conn.QueuePair().(dispatcher); ok {
		s.Dispatches = d.Dispatches()
	}
	runtime.KeepAlive(h)
	return s
}

// Stats counts what a connection did. Every counter only grows.
type Stats struct {
	BytesWritten     uint64 `json:"bytes_written"`  // accepted by Write
	BytesRead        uint64 `json:"bytes_read"`     // returned by Read
	BytesSent        uint64 `json:"bytes_sent"`     // carried by RDMA writes to the peer
	BytesReceived    uint64 `json:"bytes_received"` // written into our receive ring by the peer
	MessagesSent     uint64 `json:"messages_sent"`  // data transfers (RDMA writes with immediate)
	MessagesReceived uint64 `json:"messages_received"`
	InlineSends      uint64 `json:"inline_sends"` // transfers small enough to travel inside the work request
	// CoalescedWrites counts Writes whose bytes went out in one transfer
	// with bytes of an earlier Write (see Config.NoDelay).
	CoalescedWrites uint64 `json:"coalesced_writes"`

	CreditUpdatesSent     uint64 `json:"credit_updates_sent"`
	CreditUpdatesReceived uint64 `json:"credit_updates_received"`
	KeepalivesSent        uint64 `json:"keepalives_sent"`

	// Stalls count the times data was waiting but could not go out.
	CreditStalls uint64 `json:"credit_stalls"` // the peer had granted no more messages
	BufferStalls uint64 `json:"buffer_stalls"` // the peer had granted no more receive-ring space
	QueueStalls  uint64 `json:"queue_stalls"`  // the send queue was full

	SendCompletions  uint64 `json:"send_completions"`
	RecvCompletions  uint64 `json:"recv_completions"`
	ErrorCompletions uint64 `json:"error_completions"` // completions with an error status
	CQPolls          uint64 `json:"cq_polls"`          // polls of the completion queue (each one crossing into C)

	// How Reads, Writes and Close waited (see Config.BusyPoll): Spins
	// counts waits that polled the CQ in a loop, Parks the times a waiting
	// goroutine parked until the completion channel or another caller
	// woke it. A park on the channel costs one crossing into C (two for
	// the connection's first, which arms the CQ, and for one with work to
	// post first) and a wakeup through the netpoller, a spin one crossing
	// per round. A wait that finds the channel already signalled is no
	// park.
	//
	// SpinsDeferred counts the waits that would have spun but went to
	// park at once, because another caller of the poll group (another
	// connection's, or this one's other Read or Write) was spinning and
	// polls the shared CQ for them all; SpinsLeft the spins that ended
	// early, and went to park, because their polls handed other
	// connections of the group completions, and they then need the CPU.
	Spins         uint64 `json:"spins"`
	Parks         uint64 `json:"parks"`
	SpinsDeferred uint64 `json:"spins_deferred"`
	SpinsLeft     uint64 `json:"spins_left"`
	// HandOffs counts the times the wait for completions passed from one
	// of the connection's goroutines to another (a Read, Write or Close
	// blocked behind it, or the goroutine that sends what a returned Write
	// left), each a goroutine wakeup. Dispatches counts the times another
	// goroutine polled the connection's completions (its poll group's
	// leader, or another connection of the group in its own step) and
	// woke the connection's waiter with them.
	HandOffs   uint64 `json:"hand_offs"`
	Dispatches uint64 `json:"dispatches"`

	// SendRingSize and RecvRingSize are the sizes of the rings now, not
	// counters: they start at Config.IdleBufferSize, grow up to
	// SendBufferSize and RecvBufferSize while the connection is busy, and
	// shrink back once it is quiet.
	SendRingSize int `json:"send_ring_size"`
	RecvRingSize int `json:"recv_ring_size"`
	// RingGrowths and RingShrinks count the moves of either ring to a
	// larger or a smaller region.
	RingGrowths uint64 `json:"ring_growths"`
	RingShrinks uint64 `json:"ring_shrinks"`
	// RegionsDeclined counts the larger or smaller regions that could not
	// be registered (the locked-memory limit, say): the ring stayed as it
	// was, and the connection went on.
	RegionsDeclined uint64 `json:"regions_declined"`
	// CreditWindowGrowths counts the times the credit window (the
	// messages the peer may send ahead of our reading) grew. Only a
	// connection that takes its receives from its poll group's shared
	// receive queue starts with a small window and grows it, while the
	// queue has receives to spare (see docs/design.md, "Poll groups").
	CreditWindowGrowths uint64 `json:"credit_window_growths"`
	// Resumes counts the times the connection moved to a new queue pair
	// after its path failed (Config.Resume), and BytesResent the bytes it
	// sent again then, which the peer had not received; ConnInfo says
	// which device it runs on now.
	Resumes     uint64 `json:"resumes"`
	BytesResent uint64 `json:"bytes_resent"`
}

// dispatcher is a queue pair in a poll group: it counts Stats.Dispatches.
type dispatcher interface{ Dispatches() uint64 }

// statsOf is s as Conn.Stats reports it.
func statsOf(snap stream.Snapshot) Stats {
	s := &snap.Engine
	return Stats{
		BytesWritten:          s.BytesWritten,
		BytesRead:             s.BytesRead,
		BytesSent:             s.BytesSent,
		BytesReceived:         s.BytesReceived,
		MessagesSent:          s.MessagesSent,
		MessagesReceived:      s.MessagesReceived,
		InlineSends:           s.InlineSends,
		CoalescedWrites:       s.CoalescedWrites,
		CreditUpdatesSent:     s.CreditUpdatesSent,
		CreditUpdatesReceived: s.CreditUpdatesReceived,
		KeepalivesSent:        s.KeepalivesSent,
		CreditStalls:          s.CreditStalls,
		BufferStalls:          s.BufferStalls,
		QueueStalls:           s.QueueStalls,
		SendCompletions:       s.SendCompletions,
		RecvCompletions:       s.RecvCompletions,
		ErrorCompletions:      s.ErrorCompletions,
		CQPolls:               snap.CQPolls,
		Spins:                 snap.Spins,
		Parks:                 snap.Parks,
		SpinsDeferred:         snap.SpinsDeferred,
		SpinsLeft:             snap.SpinsLeft,
		HandOffs:              snap.HandOffs,
		RingGrowths:           s.SendRingGrowths + s.RecvRingGrowths,
		RingShrinks:           s.SendRingShrinks + s.RecvRingShrinks,
		RegionsDeclined:       s.RegionsDeclined,
		CreditWindowGrowths:   s.CreditWindowGrowths,
		SendRingSize:          snap.SendRingSize,
		RecvRingSize:          snap.RecvRingSize,
		Resumes:               resumesOf(snap.Resume),
		BytesResent:           snap.Resume.BytesResent,
	}
}

// resumesOf is the resumes of r, whatever their cause.
func resumesOf(r stream.ResumeStats) (n uint64) {
	for _, k := range r.Resumes {
		n += k
	}
	return n
}

// streamSettings is what the connection driver takes of s.
func (s *settings) streamSettings() stream.Settings {
	return stream.Settings{
		Ring:             s.ring,
		ReapDelay:        s.reapDelay,
		BusyPoll:         s.busyPoll,
		BusyPollLimit:    s.busyPollLimit,
		BusyPollLimitMax: s.busyPollLimitMax,
		KeepAlive:        s.keepAlive,
		Linger:           max(s.linger, 0), // Config's negative is the driver's 0: no wait
		Observer:         connObserver{logFor(s.logger)},
		RingResized:      logFor(s.logger).ringResizedFunc(),
	}
}
