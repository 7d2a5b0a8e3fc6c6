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

// join reserves room for depth completions in a group on ctx, whose CQs
// hold at most maxCQE.
func (r *groupRegistry) join(ctx *verbs.Context, maxCQE, depth int, accepting bool) (*groupMember, error) {
	key := uintptr(ctx.Ptr())
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.byDevice[key] {
		if m, ok := g.reserve(depth); ok {
			return m, nil
		}
	}
	entries := groupCQEntries
	if maxCQE > 0 {
		entries = min(entries, maxCQE)
	}
	cq, err := newVerbsCQ(ctx, max(entries, depth), accepting)
	if err != nil {
		return nil, err
	}
	g := newPollGroup(cq)
	m, ok := g.reserve(depth)
	if !ok {
		// Unreachable: the CQ holds at least depth.
		g.leave(&groupMember{g: g}, nil)
		return nil, &verbs.Error{Op: "ibv_create_cq", Device: ctx.Name(), Err: errInboxOverflow}
	}
	r.byDevice[key] = append(r.byDevice[key], g)
	return m, nil
}

// leave destroys m's queue pair with destroyQP (if not nil) and ends its
// membership, freeing its group if m was the last member.
func (r *groupRegistry) leave(m *groupMember, destroyQP func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := m.g
	err := g.leave(m, destroyQP)
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
