//go:build linux && cgo

package pollgroup

import "github.com/rnet-dev/rnet/internal/verbs"

// groupCQEntries is how many completions a poll group's CQ asks for, within
// the device's max_cqe: with the default queue sizes, about 40 connections
// per group on rxe. A group costs one CQ, one fd and one goroutine.
const groupCQEntries = 32767

// devices holds the process's poll groups, per device.
var devices = Registry{byDevice: make(map[uintptr][]*Group)}

// Needs is what a connection asks of a poll group.
type Needs struct {
	Depth      int  // completions its queue pair may have outstanding (send and receive depths)
	SendDepth  int  // of them, sends
	Recvs      int  // receives it claims of a shared receive queue
	ShareRecvs bool // it may take its receives from a shared queue
	// SetupStage, if not nil, is called as each resource of a new group
	// is made ("comp channel", "cq"), and fails the join where it
	// returns an error, as a device refusing that resource would.
	SetupStage func(stage string) error
}

// Join reserves room for a connection in a poll group on ctx, making one
// when none has room. The member's queue pair must complete into m.CQ()
// and take its receives from m.SRQ(); then Attach it.
func Join(ctx *verbs.Context, info verbs.DeviceInfo, need Needs) (*Member, error) {
	return devices.join(ctx, info, need)
}

// Count returns how many poll groups the process has, for tests.
func Count() int { return devices.count() }

// Sharing returns how many poll groups have a shared receive queue, for
// tests.
func Sharing() int { return devices.sharing() }

func (r *Registry) join(ctx *verbs.Context, info verbs.DeviceInfo, need Needs) (*Member, error) {
	key := uintptr(ctx.Ptr())
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.byDevice[key] {
		if g.sharesRecvs != need.ShareRecvs {
			continue
		}
		if m, ok := g.Reserve(need.Depth, need.SendDepth, need.Recvs); ok {
			m.reg = r
			return m, nil
		}
	}
	entries := groupCQEntries
	if info.MaxCQE > 0 {
		entries = min(entries, info.MaxCQE)
	}
	cq, err := newVerbsCQ(ctx, max(entries, need.Depth), need.SetupStage)
	if err != nil {
		return nil, err
	}
	g := New(cq, cq.cq)
	g.sharesRecvs = need.ShareRecvs
	if claimable := min(srqClaimable, info.MaxSRQWR-srqSpare); need.ShareRecvs && info.MaxSRQ > 0 && claimable >= need.Recvs &&
		claimable+srqSpare+need.SendDepth <= cq.Size() {
		// Without a shared queue (the device refused one) the group's
		// queue pairs keep receive queues of their own, as they would on
		// iWARP.
		if rq, err := newVerbsSRQ(ctx, claimable+srqSpare); err == nil {
			if err := g.ShareRecvs(rq, claimable); err != nil {
				rq.Destroy()
			} else {
				g.deviceSRQ = rq.srq
			}
		}
	}
	m, ok := g.Reserve(need.Depth, need.SendDepth, need.Recvs)
	if !ok {
		// Unreachable: the CQ holds at least depth. The group has no
		// member to free what it made when it leaves: free it here.
		if g.srq != nil {
			g.srq.rq.Destroy()
		}
		cq.Destroy()
		return nil, &verbs.Error{Op: "ibv_create_cq", Device: ctx.Name(), Err: errInboxOverflow}
	}
	m.reg = r
	r.byDevice[key] = append(r.byDevice[key], g)
	return m, nil
}
