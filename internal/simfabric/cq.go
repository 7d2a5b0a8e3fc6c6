package simfabric

import (
	"errors"

	"github.com/rnet-dev/rnet/internal/wr"
)

// ErrCQOverflow is what CQ.Poll returns, for good, once more completions
// came than the CQ holds: a device's CQ then goes to an error state.
var ErrCQOverflow = errors.New("simfabric: completion queue overflow")

// NewCQ returns a completion queue for PairOn.
func (f *Fabric) NewCQ(opts CQOptions) *CQ {
	if opts.Entries <= 0 {
		opts.Entries = 32767
	}
	return &CQ{f: f, opts: opts, notify: make(chan struct{}, 1)}
}

// Size returns how many completions the CQ holds.
func (q *CQ) Size() int { return q.opts.Entries }

// Notify returns a channel that receives a value (capacity 1, never
// closed) when completions may be available; with CQOptions.Armed only
// after Arm. A waiter should drain Poll after each wake-up.
func (q *CQ) Notify() <-chan struct{} { return q.notify }

// Arm asks for one notification, for the next completion added, as
// ibv_req_notify_cq does: completions already in the CQ leave none. It does
// nothing unless the CQ was made with CQOptions.Armed.
func (q *CQ) Arm() {
	if !q.opts.Armed {
		return
	}
	q.f.mu.Lock()
	q.armed = true
	q.f.mu.Unlock()
}

// ArmSends is Arm for send completions, apart from receive completions,
// on a CQ made with CQOptions.SplitArm; otherwise it is Arm.
func (q *CQ) ArmSends() {
	if !q.opts.SplitArm {
		q.Arm()
		return
	}
	q.f.mu.Lock()
	q.armedS = true
	q.f.mu.Unlock()
}

// Polled returns how many completions Poll has returned.
func (q *CQ) Polled() uint64 {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	return q.polled
}

// Signals returns how many notifications the CQ has raised (see Notify):
// with CQOptions.Armed, one per arm that a completion met.
func (q *CQ) Signals() uint64 { return q.signals.Load() }

func (q *CQ) signal() {
	q.signals.Add(1)
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// push adds e's completion; called with f.mu held.
func (q *CQ) push(e *Endpoint, wc wr.Completion, send bool) {
	if q.failed.Load() {
		return
	}
	if q.queue.len() >= q.opts.Entries {
		q.failed.Store(true)
		q.signal() // the waiter polls and learns of it
		return
	}
	q.queue.push(sharedEntry{ep: e, wc: wc, send: send})
	q.length.Add(1)
	switch {
	case !q.opts.Armed:
		q.signal()
	case q.opts.SplitArm && send:
		if q.armedS {
			q.armedS = false
			q.signal()
		}
	case q.armed:
		q.armed = false
		q.signal()
	}
}

// Poll copies up to len(out) completions into out, oldest first, and
// returns how many. The payloads of their endpoints land in memory first.
// Completions of an endpoint killed since are dropped.
func (q *CQ) Poll(out []wr.Completion) (int, error) {
	if q.length.Load() == 0 && !q.failed.Load() {
		return 0, nil // lock-free, as a device's poll of an empty CQ
	}
	f := q.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.failed.Load() {
		return 0, ErrCQOverflow
	}
	n := 0
	for n < len(out) && q.queue.len() > 0 {
		ent := q.queue.pop()
		q.length.Add(-1)
		e := ent.ep
		if e.dead {
			continue
		}
		if ent.send {
			e.sendsInFlight--
		}
		e.land()
		out[n] = ent.wc
		n++
		e.stats.Completions++
		if ent.wc.Status != wr.WCSuccess {
			e.stats.ErrorCompletion++
		}
	}
	q.polled += uint64(n)
	return n, nil
}

// showVisibleSends moves e's send completions that have become visible
// into its shared CQ, in order; called with f.mu held.
func (e *Endpoint) showVisibleSends(now int64) bool {
	moved := false
	for e.sendCQ.len() > 0 && e.sendCQ.front().visibleAt <= now {
		ent := e.sendCQ.pop()
		e.shared.push(e, ent.wc, true)
		moved = true
	}
	return moved
}
