package simfabric

import (
	"errors"
	"math/rand/v2"
	"sync"

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

// Step advances time by one step, delivers what is due and reports whether
// anything happened (a delivery, or a completion becoming visible).
func (f *Fabric) Step() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now++
	progress := false
	for _, e := range f.eps {
		if f.pump(e) {
			progress = true
		}
	}
	for _, e := range f.eps {
		if e.shared != nil {
			if !e.dead && e.showVisibleSends(f.now) {
				progress = true
			}
			continue
		}
		if e.becameVisible(f.now) {
			progress = true
			e.signal()
		}
	}
	return progress
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

// Kill makes e vanish without a word, like a crashed host: its pending
// work is dropped, it completes nothing more, and whatever its peer sends
// it fails with WCRetryExcErr.
func (f *Fabric) Kill(e *Endpoint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.dead {
		return
	}
	e.dead = true
	for e.wire.len() > 0 {
		op := e.wire.pop()
		e.peer.landing.push(landing{start: op.payStart, end: op.payEnd})
	}
	e.sendCQ = queue[cqEntry]{}
	e.recvCQ = queue[cqEntry]{}
	e.cqLen.Store(0)
	e.recvQ = queue[wr.Recv]{}
	e.signal()
	if f.opts.Auto {
		f.pump(e.peer)
	}
}

// delay draws a random delay in [0, max].
func (f *Fabric) delay(max int) int64 {
	if max <= 0 {
		return 0
	}
	return int64(f.rng.IntN(max + 1))
}
