//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// groupCQEntries is how many completions a poll group's CQ asks for, within
// the device's max_cqe: with the default queue sizes, about 40 connections
// per group on rxe. A group costs one CQ, one fd and one goroutine.
const groupCQEntries = 32767

// pollGroups holds the process's poll groups, per device.
var pollGroups = groupRegistry{byDevice: make(map[uintptr][]*pollGroup)}

// groupRegistry finds a connection a poll group with room for its
// completions, making one when none has room, and forgets groups whose
// last member left.
type groupRegistry struct {
	mu       sync.Mutex
	byDevice map[uintptr][]*pollGroup // by struct ibv_context *
}

// groupNeeds is what a connection asks of a poll group.
type groupNeeds struct {
	depth      int  // completions its queue pair may have outstanding (send and receive depths)
	sendDepth  int  // of them, sends
	recvs      int  // receives it claims of a shared receive queue
	shareRecvs bool // it may take its receives from a shared queue
}

// join reserves room for a connection in a group on ctx, making one when
// none has room.
func (r *groupRegistry) join(ctx *verbs.Context, info verbs.DeviceInfo, need groupNeeds, accepting bool) (*groupMember, error) {
	key := uintptr(ctx.Ptr())
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.byDevice[key] {
		if g.sharesRecvs != need.shareRecvs {
			continue
		}
		if m, ok := g.reserve(need.depth, need.sendDepth, need.recvs); ok {
			return m, nil
		}
	}
	entries := groupCQEntries
	if info.MaxCQE > 0 {
		entries = min(entries, info.MaxCQE)
	}
	cq, err := newVerbsCQ(ctx, max(entries, need.depth), accepting)
	if err != nil {
		return nil, err
	}
	g := newPollGroup(cq)
	g.sharesRecvs = need.shareRecvs
	if claimable := min(srqClaimable, info.MaxSRQWR-srqSpare); need.shareRecvs && info.MaxSRQ > 0 && claimable >= need.recvs &&
		claimable+srqSpare+need.sendDepth <= cq.size() {
		// Without a shared queue (the device refused one) the group's
		// queue pairs keep receive queues of their own, as they would on
		// iWARP.
		if rq, err := newVerbsSRQ(ctx, claimable+srqSpare); err == nil {
			if err := g.shareRecvs(rq, claimable); err != nil {
				rq.destroy()
			}
		}
	}
	m, ok := g.reserve(need.depth, need.sendDepth, need.recvs)
	if !ok {
		// Unreachable: the CQ holds at least depth.
		g.leave(&groupMember{g: g}, nil)
		return nil, &verbs.Error{Op: "ibv_create_cq", Device: ctx.Name(), Err: errInboxOverflow}
	}
	r.byDevice[key] = append(r.byDevice[key], g)
	return m, nil
}

// leave destroys m's queue pair with destroyQP (if not nil) and ends its
// membership, freeing its group if m was the last member. The group's
// leave polls its CQ, so it runs without r.mu: joins and leaves on every
// device take it. A closed group takes no one (see reserve), so a join
// meanwhile passes it by.
func (r *groupRegistry) leave(m *groupMember, destroyQP func() error) error {
	g := m.g
	err := g.leave(m, destroyQP)
	r.mu.Lock()
	defer r.mu.Unlock()
	if g.isClosed() {
		for key, gs := range r.byDevice {
			for i, x := range gs {
				if x == g {
					gs = append(gs[:i], gs[i+1:]...)
					break
				}
			}
			if len(gs) == 0 {
				delete(r.byDevice, key)
			} else {
				r.byDevice[key] = gs
			}
		}
	}
	return err
}

// sharing returns how many poll groups have a shared receive queue, for
// tests.
func (r *groupRegistry) sharing() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, gs := range r.byDevice {
		for _, g := range gs {
			if g.srq != nil {
				n++
			}
		}
	}
	return n
}

// count returns how many poll groups the process has, for tests.
func (r *groupRegistry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, gs := range r.byDevice {
		n += len(gs)
	}
	return n
}

// verbsCQ is a poll group's CQ and completion channel on a device.
type verbsCQ struct {
	cc *verbs.CompChannel
	cq *verbs.CQ
}

func newVerbsCQ(ctx *verbs.Context, entries int, accepting bool) (*verbsCQ, error) {
	cc, err := ctx.NewCompChannel()
	if err != nil {
		return nil, err
	}
	if err := setupStep(accepting, "comp channel"); err != nil {
		cc.Close()
		return nil, err
	}
	cq, err := ctx.NewCQ(entries, cc)
	if err == nil {
		err = setupStep(accepting, "cq")
		if err != nil {
			cq.Close()
		}
	}
	if err != nil {
		cc.Close()
		return nil, err
	}
	return &verbsCQ{cc: cc, cq: cq}, nil
}

func (c *verbsCQ) poll(flags verbs.StepFlags, out []wr.Completion, tries int) (int, error) {
	return c.cq.Step(flags, out, tries)
}

func (c *verbsCQ) waitReady() error {
	_, err := c.cc.WaitReady(context.Background())
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// interrupt's way in: a past deadline on the channel's fd.
		c.cc.SetDeadline(time.Time{})
		return errInterrupted
	}
	return err
}

// interrupt sets a past deadline: it stays until the wait it ends (or the
// next one) clears it, so it is never lost.
func (c *verbsCQ) interrupt() { c.cc.SetDeadline(aLongTimeAgo) }

var aLongTimeAgo = time.Unix(1, 0)

func (c *verbsCQ) shutdown() { c.cc.Close() }

// destroy closes the CQ, which destroys the channel too: Close left it to
// the CQ's.
func (c *verbsCQ) destroy() error {
	err := c.cq.Close()
	if cerr := c.cc.Close(); err == nil {
		err = cerr
	}
	return err
}

func (c *verbsCQ) size() int { return c.cq.Size() }

// verbsSRQ is a poll group's shared receive queue on a device, in a
// protection domain of its own: its receives carry no buffer, so that
// domain holds no memory and no key.
type verbsSRQ struct {
	pd  *verbs.PD
	srq *verbs.SRQ
}

func newVerbsSRQ(ctx *verbs.Context, receives int) (*verbsSRQ, error) {
	pd, err := ctx.AllocPD()
	if err != nil {
		return nil, err
	}
	srq, err := pd.NewSRQ(verbs.SRQCaps{MaxWR: uint32(receives), MaxSGE: 1})
	if err != nil {
		pd.Close()
		return nil, err
	}
	return &verbsSRQ{pd: pd, srq: srq}, nil
}

func (s *verbsSRQ) post(n int) error {
	_, err := s.srq.PostRecv(anonymousRecvs[:n])
	return err
}

func (s *verbsSRQ) destroy() error {
	return errors.Join(s.srq.Close(), s.pd.Close())
}
