package simfabric

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/rnet-dev/rnet/internal/wr"
)

// Errors returned by PostSend and PostRecv, standing for the errno of
// ibv_post_send and ibv_post_recv.
var (
	ErrDead      = errors.New("simfabric: endpoint killed")
	ErrQueueFull = errors.New("simfabric: work queue full")      // ENOMEM
	ErrInvalidWR = errors.New("simfabric: invalid work request") // EINVAL
)

// Options configure a Fabric.
type Options struct {
	// Auto delivers work requests as they are posted and makes their
	// completions visible at once, for tests that drive endpoints from
	// several goroutines. Otherwise nothing moves until Step.
	Auto bool
	// MaxWireDelay is the largest number of steps a work request waits
	// before it reaches the peer (deterministic mode).
	MaxWireDelay int
	// MaxCompletionDelay is the largest number of steps a send completion
	// waits after delivery before it can be polled (deterministic mode).
	MaxCompletionDelay int
	// DirectLanding (with Auto) copies a request's bytes into the peer's
	// memory as it is posted, on the posting goroutine, as a NIC's DMA
	// lands them while the peer's CPU runs: one copy instead of two. The
	// fabric's mutex orders that copy before the peer's PollCQ that returns
	// the completion announcing it, so under -race it is clean exactly for
	// a protocol that reads its memory only after that completion and
	// reuses memory only after the peer says it is done, and any other read
	// is reported as the race it would be on hardware. rsocket over RoCE
	// and InfiniBand keeps that promise; its iWARP SGL updates do not
	// (they are read when they may be in flight), so leave it off there.
	// Requests that must wait (behind others, or for a receive) still land
	// when the peer polls.
	DirectLanding bool
	// RNRRetry makes a message that finds no posted receive wait for one,
	// like rnr_retry_count=7, instead of failing with WCRNRRetryExcErr.
	RNRRetry bool
}

// Caps are the capabilities of one queue pair. Zero fields get defaults.
type Caps struct {
	SendDepth int // max_send_wr; default 1024
	RecvDepth int // max_recv_wr; default 1024
	MaxInline int // max_inline_data; default 256
}

func (c Caps) withDefaults() Caps {
	if c.SendDepth == 0 {
		c.SendDepth = 1024
	}
	if c.RecvDepth == 0 {
		c.RecvDepth = 1024
	}
	if c.MaxInline == 0 {
		c.MaxInline = 256
	}
	return c
}

// Stats are fabric-wide counters.
type Stats struct {
	Delivered      uint64 // work requests that reached a live peer
	BytesDelivered uint64
	RNR            uint64 // messages that failed for lack of a receive
	RNRStalls      uint64 // delivery attempts that waited for a receive (RNRRetry)
	Errors         uint64 // error completions, flushes included
}

// Fabric connects pairs of endpoints. All its state is behind one mutex.
type Fabric struct {
	mu      sync.Mutex
	opts    Options
	rng     *rand.Rand
	now     int64
	eps     []*Endpoint
	nextKey uint32
	lastQP  uint32 // the last queue pair number given
	stats   Stats
}

// EndpointStats count one endpoint's traffic.
type EndpointStats struct {
	SendsPosted     uint64
	RecvsPosted     uint64
	Completions     uint64 // returned by PollCQ
	ErrorCompletion uint64
	RNR             uint64 // its messages that failed for lack of a receive at the peer
}

// Endpoint is one side of a simulated RC connection: a queue pair, its
// CQ (its own, or a shared one: see PairOn) and its registered memory. Its
// methods are safe for concurrent use.
//
// Fabric, Endpoint and CQ are declared together here because each refers
// to the others; their methods are in the files named after them.
type Endpoint struct {
	f        *Fabric
	peer     *Endpoint
	caps     Caps
	qpNum    uint32
	shared   *CQ // the CQ it completes into, nil for its own
	regions  []region
	nextAddr uint64

	dead   bool
	qpErr  bool
	cut    bool        // the wire to its peer is cut (Cut): nothing it sends arrives
	inject wr.WCStatus // failure for the next completion, if not WCSuccess

	wire          queue[wireOp] // outbound, in posting order
	lastDeliverAt int64
	recvQ         queue[wr.Recv]
	landing       queue[landing] // inbound payloads, in delivery order
	inbound       byteFIFO       // their bytes

	// sendCQ and recvCQ are its own CQ. With a shared CQ, recvCQ stays
	// empty and sendCQ holds the send completions not visible yet.
	sendCQ queue[cqEntry]
	recvCQ queue[cqEntry]
	// cqLen counts the entries of sendCQ and recvCQ, so that polling an
	// empty CQ takes no lock: on hardware it is a read of the CQ's next
	// entry, and a spinning poller must not slow the peer down.
	cqLen         atomic.Int64
	lastSendVis   int64
	cqSeq         uint64
	sendsInFlight int // posted sends whose completion has not been polled

	notify chan struct{}
	stats  EndpointStats
}

type region struct {
	buf         []byte
	addr        uint64
	lkey, rkey  uint32
	remoteWrite bool
}

// wireOp is a posted send work request on its way to the peer. Its payload
// already sits in the peer's inbound FIFO at [payStart, payEnd).
type wireOp struct {
	id         uint64
	op         wr.Opcode
	imm        uint32
	signaled   bool
	remoteAddr uint64
	rkey       uint32
	length     uint32
	payStart   uint64
	payEnd     uint64
	deliverAt  int64
}

// landing is a delivered (or dropped, dst == nil) payload waiting to be
// copied into this endpoint's memory when it next polls.
type landing struct {
	dst        []byte
	start, end uint64
}

type cqEntry struct {
	wc        wr.Completion
	visibleAt int64
	seq       uint64
}

// CQOptions configure a completion queue that endpoints share.
type CQOptions struct {
	// Entries is how many completions the CQ holds (ibv_create_cq's cqe);
	// default 32767. One completion more is an overflow.
	Entries int
	// Armed makes Notify fire as a device's completion channel does: once,
	// for the first completion added after Arm. Otherwise it fires after
	// every completion added, like an endpoint's own Notify.
	Armed bool
	// SplitArm, with Armed, makes the CQ act as a device's split CQ (a
	// receive CQ and a send CQ on one channel): Arm arms it for receive
	// completions only, ArmSends for send completions.
	SplitArm bool
}

// CQ is a completion queue that many endpoints complete into, as a poll
// group's CQ on a device: each completion names its queue pair in QPNum.
// Completions of one endpoint come out in the order its own CQ would give
// them; those of different endpoints in the order they were generated.
//
// Payloads land in an endpoint's memory when the CQ is polled, before the
// endpoint's completions are returned, on whichever goroutine polls: the
// goroutine that then hands a completion to the endpoint's owner must order
// that hand-over (a mutex, a channel), as it must for Options.DirectLanding.
type CQ struct {
	f      *Fabric
	opts   CQOptions
	queue  queue[sharedEntry] // under f.mu
	length atomic.Int64       // entries in queue, read without the lock
	failed atomic.Bool        // overflowed: every poll fails
	armed  bool               // under f.mu; Armed only (with SplitArm: for receive completions)
	armedS bool               // under f.mu; SplitArm only: armed for send completions
	notify chan struct{}
	polled uint64 // completions returned, under f.mu
	// signals counts the notifications raised (see Signals).
	signals atomic.Uint64
}

// sharedEntry is one completion in a shared CQ, with the endpoint it
// belongs to (for landing its payloads and counting its send queue).
type sharedEntry struct {
	ep   *Endpoint
	wc   wr.Completion
	send bool
}

// New returns a fabric whose random choices all derive from seed.
func New(seed uint64, opts Options) *Fabric {
	if opts.Auto {
		opts.MaxWireDelay, opts.MaxCompletionDelay = 0, 0
	} else {
		opts.DirectLanding = false
	}
	return &Fabric{
		opts:    opts,
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nextKey: 0x100,
	}
}

// Pair creates two connected endpoints with the given capabilities, each
// with its own CQ.
func (f *Fabric) Pair(a, b Caps) (*Endpoint, *Endpoint) { return f.PairOn(a, b, nil, nil) }

// PairOn is Pair for endpoints that complete into the shared CQs cqA and
// cqB (made by f.NewCQ; they may be the same); a nil CQ gives its endpoint
// its own, as Pair does.
func (f *Fabric) PairOn(a, b Caps, cqA, cqB *CQ) (*Endpoint, *Endpoint) {
	for _, cq := range []*CQ{cqA, cqB} {
		if cq != nil && cq.f != f {
			panic("simfabric: a CQ of another fabric")
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ea, eb := f.newEndpoint(a, cqA), f.newEndpoint(b, cqB)
	ea.peer, eb.peer = eb, ea
	return ea, eb
}

func (f *Fabric) newEndpoint(c Caps, cq *CQ) *Endpoint {
	f.lastQP++
	e := &Endpoint{
		f:      f,
		caps:   c.withDefaults(),
		qpNum:  f.lastQP,
		shared: cq,
		// Distinct address spaces make an address used on the wrong side
		// fail instead of silently hitting memory.
		nextAddr: uint64(len(f.eps)+1) << 40,
		notify:   make(chan struct{}, 1),
	}
	f.eps = append(f.eps, e)
	return e
}

// Now returns the number of steps taken.
func (f *Fabric) Now() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Stats returns a snapshot of the fabric's counters.
func (f *Fabric) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Pending reports whether anything is still on the wire or waiting to
// become visible, i.e. whether Step can still make progress by itself.
func (f *Fabric) Pending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.eps {
		if e.dead {
			continue
		}
		if e.wire.len() > 0 {
			return true
		}
		if e.sendCQ.len() > 0 && e.sendCQ.buf[(e.sendCQ.head+e.sendCQ.n-1)%len(e.sendCQ.buf)].visibleAt > f.now {
			return true
		}
	}
	return false
}

// delay draws a random delay in [0, max].
func (f *Fabric) delay(max int) int64 {
	if max <= 0 {
		return 0
	}
	return int64(f.rng.IntN(max + 1))
}
