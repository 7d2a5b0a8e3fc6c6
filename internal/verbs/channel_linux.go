//go:build cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rnet-dev/rnet/internal/lockcount"

	"golang.org/x/sys/unix"
)

// ackBatch is how many CQ events are acknowledged per ibv_ack_cq_events
// call: acknowledging takes a mutex inside libibverbs, so it is batched, and
// CQ.Close acknowledges the rest (ibv_destroy_cq waits for that).
const ackBatch = 16

// CompChannel is a completion channel (struct ibv_comp_channel): CQs created
// on it report "new completion" events there once armed with ReqNotify.
type CompChannel struct {
	c    *C.struct_ibv_comp_channel
	poll *PollFD
	dev  string

	mu    lockcount.Mutex
	cqs   map[C.uintptr_t]*CQ // live CQs on this channel by handle, to turn an event into a *CQ; under mu
	state ChannelClose        // under mu
	sole  atomic.Bool         // cqs is one CQ (with its send half): see updateSoleLocked; read without mu on the hot path
}

// updateSoleLocked records whether the channel's CQs are one CQ, or one
// split CQ and its send half: an event taken from the channel then belongs
// to whoever steps that CQ. Called with mu held.
func (ch *CompChannel) updateSoleLocked() {
	sole := len(ch.cqs) == 1
	if len(ch.cqs) == 2 {
		for _, cq := range ch.cqs {
			if cq.send != nil && ch.cqs[handle(unsafe.Pointer(cq.send.c))] == cq.send {
				sole = true
			}
		}
	}
	ch.sole.Store(sole)
}

// CQ is a completion queue. It is declared here, beside CompChannel,
// because each refers to the other; its methods are in cq_linux.go.
type CQ struct {
	mu  lockcount.RWMutex // read-held by Poll and ReqNotify, write-held by Close; Step takes none
	c   *C.struct_ibv_cq
	ch  *CompChannel
	dev string
	cqe int

	// Guarded by ch.mu: events read from the channel and not yet
	// acknowledged, and whether Close has started.
	unacked uint32
	dead    bool

	// send, if not nil, is the CQ the send completions of this split CQ's
	// queue pairs go to (see NewSplitCQ); it lives and dies with this one.
	send *CQ
}

// NewCompChannel creates a completion channel and prepares its fd for
// waiting in the netpoller.
func (ctx *Context) NewCompChannel() (*CompChannel, error) {
	ctx.mu.RLock()
	defer ctx.mu.RUnlock()
	if ctx.c == nil {
		return nil, ctx.closedErr("ibv_create_comp_channel")
	}
	CountCgoCall()
	c, err := C.ibv_create_comp_channel(ctx.c)
	if c == nil {
		return nil, &Error{Op: "ibv_create_comp_channel", Device: ctx.name, Errno: errnoOr(err, syscall.ENOMEM)}
	}
	p, perr := NewPollFD(int(c.fd), "ibv_comp_channel "+ctx.name)
	if perr != nil {
		CountCgoCall()
		C.ibv_destroy_comp_channel(c)
		return nil, perr
	}
	return &CompChannel{c: c, poll: p, dev: ctx.name, cqs: make(map[C.uintptr_t]*CQ)}, nil
}

// Wait parks the goroutine until a CQ on this channel reports an event and
// returns that CQ, which is then no longer armed: call ReqNotify, then Poll
// until empty, as the verbs documentation prescribes. The event is
// acknowledged (in batches) here.
//
// Wait fails with os.ErrDeadlineExceeded after SetDeadline's deadline, with
// ctx's error when ctx ends, and with net.ErrClosed when the channel is
// closed, also from another goroutine during the wait.
func (ch *CompChannel) Wait(ctx context.Context) (*CQ, error) {
	for {
		w := cqEventWaits.Get().(*cqEventWait)
		w.ch = ch
		err := ch.poll.WaitFunc(ctx, w.try)
		cq, errno := w.cq, w.errno
		w.ch, w.cq = nil, 0
		cqEventWaits.Put(w)
		if err != nil {
			return nil, &Error{Op: "ibv_get_cq_event", Device: ch.dev, Err: err}
		}
		if errno != 0 {
			return nil, &Error{Op: "ibv_get_cq_event", Device: ch.dev, Errno: syscall.Errno(errno)}
		}
		ch.mu.Lock()
		g := ch.cqs[cq]
		if g == nil || g.dead {
			// The CQ is being destroyed, and ibv_destroy_cq waits
			// until this event is acknowledged: do it now.
			CountCgoCall()
			C.rnet_ack_cq_events(cq, 1)
			ch.mu.Unlock()
			continue
		}
		g.unacked++
		if g.unacked >= ackBatch {
			CountCgoCall()
			C.rnet_ack_cq_events(cq, C.uint(g.unacked))
			g.unacked = 0
		}
		ch.mu.Unlock()
		return g, nil
	}
}

// WaitReady parks the goroutine until the channel may hold an event, without
// taking it: the caller's next QP.TakeEventPostAndPoll takes it in the same
// crossing as its poll. So a wait costs one poll(2) and that crossing, where
// Wait costs a crossing to find the channel empty before it parks, one to
// read the event, and the poll after it a third. Errors are Wait's. The
// wakeup may be spurious: the event may have been taken already. parked
// says the channel looked empty at first, so the goroutine did park (or
// the deadline ended the wait).
func (ch *CompChannel) WaitReady(ctx context.Context) (parked bool, err error) {
	w := readyWaits.Get().(*readyWait)
	w.looked, w.empty = false, false
	err = ch.poll.WaitFunc(ctx, w.try)
	parked = w.empty
	readyWaits.Put(w)
	if err != nil {
		return parked, &Error{Op: "wait for completion channel", Device: ch.dev, Err: err}
	}
	return parked, nil
}

// readyWait is WaitReady's try function with its state, pooled so that
// waiting does not allocate. The netpoller calls try before it parks and
// again after each wakeup. The first call must look at the fd itself: the
// runtime forgets readiness it saw before the wait began, and an event that
// came then brings no further edge. It looks with poll(2), which needs no
// crossing into C; the event stays on the channel for the caller to take.
// Any later call is a wakeup, and accepts.
type readyWait struct {
	looked bool
	empty  bool // the first look found no event
	fds    [1]unix.PollFd
	try    func(uintptr) bool
}

var readyWaits = sync.Pool{New: func() any {
	w := new(readyWait)
	w.try = func(fd uintptr) bool {
		if w.looked {
			return true
		}
		w.looked = true
		w.fds[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		n, err := unix.Poll(w.fds[:], 0)
		// On an error (EINTR) look no further: a spurious wakeup is
		// harmless, a missed one is not.
		w.empty = n == 0 && err == nil
		return !w.empty
	}
	return w
}}

// cqEventWait is the state of one Wait, pooled so that waiting does not
// allocate: the function the netpoller calls is bound once, when the waiter
// is made, and the C out-parameter lives in it.
type cqEventWait struct {
	ch    *CompChannel
	cq    C.uintptr_t // handle of the CQ that reported the event
	errno C.int
	try   func(uintptr) bool
}

var cqEventWaits = sync.Pool{New: func() any {
	w := new(cqEventWait)
	w.try = w.getEvent
	return w
}}

func (w *cqEventWait) getEvent(uintptr) bool {
	// ch.c stays valid here: it is destroyed only after PollFD.Shutdown,
	// which waits for running callbacks.
	CountCgoCall()
	w.errno = C.rnet_get_cq_event(handle(unsafe.Pointer(w.ch.c)), &w.cq)
	return w.errno != C.EAGAIN
}

// SetDeadline sets the deadline for Wait; the zero time means none. A past
// deadline wakes a waiting goroutine.
func (ch *CompChannel) SetDeadline(t time.Time) error {
	if err := ch.poll.SetDeadline(t); err != nil {
		return &Error{Op: "SetDeadline", Device: ch.dev, Err: err}
	}
	return nil
}

// Close wakes waiters (they get net.ErrClosed). The C channel itself is
// destroyed once its last CQ is closed, because libibverbs refuses to destroy
// a channel that CQs still use. It is idempotent.
func (ch *CompChannel) Close() error {
	return ch.state.Close(&ch.mu, ch.poll, ch.destroyIfUnusedLocked)
}

func (ch *CompChannel) destroyIfUnusedLocked() error {
	if !ch.state.WaitersGone() || len(ch.cqs) != 0 || ch.c == nil {
		return nil
	}
	// The PollFD owns the fd: libibverbs must not close it too.
	ch.c.fd = -1
	perr := ch.poll.Close()
	CountCgoCall()
	if r, err := C.ibv_destroy_comp_channel(ch.c); r != 0 {
		return &Error{Op: "ibv_destroy_comp_channel", Device: ch.dev, Errno: retErrno(r, err)}
	}
	ch.c = nil
	if perr != nil {
		return &Error{Op: "close", Device: ch.dev, Err: perr}
	}
	return nil
}
