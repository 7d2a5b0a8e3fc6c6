//go:build linux && cgo

package pollgroup

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// verbsCQ is a poll group's CQ and completion channel on a device: a split
// CQ, so that the group arms its send half only while members need it.
type verbsCQ struct {
	cc *verbs.CompChannel
	cq *verbs.CQ
}

func newVerbsCQ(ctx *verbs.Context, entries int, setupStage func(string) error) (*verbsCQ, error) {
	step := func(name string) error {
		if setupStage == nil {
			return nil
		}
		return setupStage(name)
	}
	cc, err := ctx.NewCompChannel()
	if err != nil {
		return nil, err
	}
	if err := step("comp channel"); err != nil {
		cc.Close()
		return nil, err
	}
	cq, err := ctx.NewSplitCQ(entries, cc)
	if err == nil {
		err = step("cq")
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

// Poll runs with the group's pollMu held, which orders it before Destroy
// (see Group.leave): verbs.CQ.Step takes no lock.
func (c *verbsCQ) Poll(flags verbs.StepFlags, out []wr.Completion, tries int) (int, error) {
	return c.cq.Step(flags, out, tries)
}

func (c *verbsCQ) WaitReady() error {
	_, err := c.cc.WaitReady(context.Background())
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Interrupt's way in: a past deadline on the channel's fd.
		c.cc.SetDeadline(time.Time{})
		return ErrInterrupted
	}
	return err
}

// Interrupt sets a past deadline: it stays until the wait it ends (or the
// next one) clears it, so it is never lost.
func (c *verbsCQ) Interrupt() { c.cc.SetDeadline(aLongTimeAgo) }

var aLongTimeAgo = time.Unix(1, 0)

func (c *verbsCQ) Shutdown() { c.cc.Close() }

// Destroy closes the CQ, which destroys the channel too: Close left it to
// the CQ's.
func (c *verbsCQ) Destroy() error {
	err := c.cq.Close()
	if cerr := c.cc.Close(); err == nil {
		err = cerr
	}
	return err
}

func (c *verbsCQ) Size() int { return c.cq.Size() }

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

func (s *verbsSRQ) Post(n int) error {
	_, err := s.srq.PostRecv(anonymousRecvs[:n])
	return err
}

func (s *verbsSRQ) Destroy() error {
	return errors.Join(s.srq.Close(), s.pd.Close())
}
