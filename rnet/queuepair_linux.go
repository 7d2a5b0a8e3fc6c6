//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/pollgroup"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/stream"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// verbsQP is a stream.QueuePair on a real device: an rdma_cm id, an RC queue pair
// whose completions go to a poll group's CQ (see internal/pollgroup), and
// the three registered regions the engine works in.
type verbsQP struct {
	// ch is the id's own event channel, for the handshake; once
	// established the id moves to establishedEvents (attached) and ch is
	// closed, unless that failed.
	ch       *cm.EventChannel
	attached bool
	id       *cm.ID
	pd       *verbs.PD
	member   *pollgroup.Member // the poll group's place for this queue pair
	qp       *verbs.QP
	// regionsMu guards mrs and left: a resume's goroutine releases the
	// device while a loan's end may remove a region.
	regionsMu sync.Mutex
	mrs       []*verbs.MR // send, recv, target at setup; then as rings move
	left      bool        // the queue pair has left its poll group, destroyed
	// released says ReleaseDevice was called: the path failed, and what
	// Info would ask the device is gone with it.
	released atomic.Bool
	device   string
	// deviceInfo is the device as setup found it, for Conn.Info.
	deviceInfo verbs.DeviceInfo
	// portMTU is the active MTU of the id's port at setup, in bytes (0 on
	// iWARP), which the private data tells the peer.
	portMTU int
	// accepting says this is the listening side (for testHookSetupStage).
	accepting bool

	laddr, raddr net.Addr

	eventsDone     chan struct{}
	eventsStop     chan struct{} // closed by shutdown: ends a retry's wait
	startOnce      sync.Once
	disconnectOnce sync.Once
	shutdownOnce   sync.Once
}

// The optional interfaces of a stream.QueuePair that verbsQP has.
var (
	_ stream.CreditClaimer  = (*verbsQP)(nil)
	_ stream.SoftwarePoster = (*verbsQP)(nil)
	_ stream.SpinSharer     = (*verbsQP)(nil)
	_ stream.DeviceReleaser = (*verbsQP)(nil)
)

// Step posts on the queue pair and takes the completions the group has
// for it, polling the group's CQ in the same crossing; flags are the
// group's business (its leader arms the CQ).
func (q *verbsQP) Step(_ verbs.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	n, err := q.member.Step(recvs, sends, out, tries)
	if err != nil && q.refusedAsGone(err) {
		err = fmt.Errorf("%w: %w", stream.ErrQueuePairGone, err)
	}
	return n, err
}

// refusedAsGone reports whether err is a post the queue pair refused
// because it or its device is gone, so that the connection's path failed
// rather than its work requests: EIO and ENODEV say the device is gone
// (the kernel's answer once it was removed); EINVAL, which is also what a
// bad work request gets, counts only when the queue pair has left RTS for
// the error state or can no longer be queried for the same reasons.
func (q *verbsQP) refusedAsGone(err error) bool {
	var ve *verbs.Error
	if !errors.As(err, &ve) {
		return false
	}
	switch ve.Op {
	case "ibv_post_send", "ibv_post_recv", "ibv_post_srq_recv":
	default:
		return false
	}
	switch ve.Errno {
	case syscall.EIO, syscall.ENODEV:
		return true
	case syscall.EINVAL:
		state, err := q.qp.State()
		if err != nil {
			return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ENODEV)
		}
		return state == verbs.QPErr
	}
	return false
}

// ClaimCredits claims n more receives of the group's shared receive queue
// for a wider credit window (see stream.CreditClaimer); it returns how many it got.
func (q *verbsQP) ClaimCredits(n int) int { return q.member.ClaimRecvs(n) }

func (q *verbsQP) Collected() bool { return q.member.Collected() }

func (q *verbsQP) CollectAll() { q.member.CollectAll() }

func (q *verbsQP) Wait() (parked bool, err error) { return q.member.Wait() }

func (q *verbsQP) Kick() { q.member.Kick() }

func (q *verbsQP) NeedSends(need bool) { q.member.NeedSends(need) }

func (q *verbsQP) Dispatches() uint64 { return q.member.Dispatches() }

// TrySpin and EndSpin let one caller of the poll group at a time spin on
// its CQ (see stream.SpinSharer).
func (q *verbsQP) TrySpin() bool { return q.member.TrySpin() }

func (q *verbsQP) EndSpin() { q.member.EndSpin() }

func (q *verbsQP) SpinWokeOthers() bool { return q.member.SpinWokeOthers() }

func (q *verbsQP) Start(h stream.EventHandler) {
	q.startOnce.Do(func() {
		err := setupStage(q.accepting, "attach events")
		if err == nil {
			err = establishedEvents.attach(q.id, q.device, h)
		}
		if err == nil {
			q.attached = true
			q.ch.Close() // no id is left on it
			q.ch = nil
			return
		}
		// Cannot share (no fd for the shared channel, say): the
		// connection reads its own, as well as it works.
		q.eventsDone = make(chan struct{})
		q.eventsStop = make(chan struct{})
		go q.events(h)
	})
}

// events delivers the connection manager's news about this connection,
// read from its own channel, when it could not attach to the shared one.
func (q *verbsQP) events(h stream.EventHandler) {
	defer close(q.eventsDone)
	var retry eventRetry
	for {
		ev, err := q.ch.Next(context.Background())
		if errors.Is(err, net.ErrClosed) {
			return // shutdown closed the channel
		}
		if err != nil {
			// Keep listening: a disconnect or a device removal must
			// still reach the connection.
			retry.wait(q.eventsStop)
			continue
		}
		retry.reset()
		dispatchEvent(h, ev.Type, q.device)
	}
}

func (q *verbsQP) Disconnect() {
	q.disconnectOnce.Do(func() { q.id.Disconnect() })
}

func (q *verbsQP) Shutdown() {
	q.shutdownOnce.Do(func() {
		if q.attached {
			establishedEvents.detach(q.id)
		}
		if q.eventsStop != nil {
			close(q.eventsStop)
		}
		q.member.Stop()
		if q.ch != nil {
			q.ch.Close()
		}
		if q.eventsDone != nil {
			<-q.eventsDone
		}
	})
}

// Destroy frees everything in dependency order: the QP before it leaves its
// poll group (the last member frees the group's CQ), memory regions and PD
// before the id that owns the device context, and the id before its event
// channel; then the regions' memory.
func (q *verbsQP) Destroy() error {
	q.regionsMu.Lock()
	defer q.regionsMu.Unlock()
	err := q.releaseDeviceLocked()
	for _, mr := range q.mrs {
		err = errors.Join(err, mr.Close())
	}
	return err
}

// ReleaseDevice frees the device's part of a queue pair whose path failed
// (stream.DeviceReleaser): the regions' memory stays for the resume.
func (q *verbsQP) ReleaseDevice() error {
	q.released.Store(true)
	q.Shutdown()
	q.regionsMu.Lock()
	defer q.regionsMu.Unlock()
	return q.releaseDeviceLocked()
}

// releaseDeviceLocked frees what Destroy frees on the device, in its
// order, each once: every close is idempotent but leaving the group.
func (q *verbsQP) releaseDeviceLocked() error {
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var closeQP func() error
	if q.qp != nil {
		closeQP = q.qp.Close
	}
	switch {
	case q.left:
	case q.member != nil:
		// The group destroys the QP (see pollgroup.Member.Leave). The
		// member stays: a late kick (the linger timer's) is harmless.
		q.left = true
		keep(q.member.Leave(closeQP))
	case closeQP != nil:
		keep(closeQP())
	}
	for _, mr := range q.mrs {
		keep(mr.Deregister())
	}
	if q.pd != nil {
		keep(q.pd.Close())
	}
	if len(errs) > 0 {
		// The id keeps the device context open, which librdmacm may close
		// once no id uses it: what failed to go is left to a later call
		// (a leak at worst), not to a freed context.
		return errors.Join(errs...)
	}
	if q.id != nil {
		keep(q.id.Close())
	}
	if q.ch != nil {
		keep(q.ch.Close())
	}
	return errors.Join(errs...)
}

func (q *verbsQP) LocalAddr() net.Addr  { return q.laddr }
func (q *verbsQP) RemoteAddr() net.Addr { return q.raddr }

// PostsInSoftware reports that the device is a kernel driver doing the
// adapter's work (rxe, siw): a post returns only once the transfer is
// done (see corkWindow).
func (q *verbsQP) PostsInSoftware() bool {
	v := q.deviceInfo.VendorID
	return v == verbs.VendorSoftRoCE || v == verbs.VendorSoftIWARP
}

// regionAccess is the access a ring's region is registered with: the
// receive ring is the only one the peer may write (besides the target
// SGL), and nothing is ever remotely readable.
func regionAccess(kind ring.RegionKind) verbs.Access {
	if kind == ring.RegionRecv {
		return verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	}
	return verbs.AccessLocalWrite
}

// AddRegion registers a new ring region in the connection's own protection
// domain, with a registration of its own: its key reaches this region
// only, and only through this connection's queue pair.
func (q *verbsQP) AddRegion(kind ring.RegionKind, size int) (ring.Region, error) {
	mr, err := q.pd.RegisterMR(size, regionAccess(kind))
	if err != nil {
		return ring.Region{}, fmt.Errorf("rnet: %s: %v ring of %d bytes: %w", q.device, kind, size, err)
	}
	q.regionsMu.Lock()
	q.mrs = append(q.mrs, mr)
	q.regionsMu.Unlock()
	return mrRegion(mr), nil
}

// RemoveRegion deregisters a region the engine retired: from then on a
// write with its key fails at the device.
func (q *verbsQP) RemoveRegion(r ring.Region) error {
	q.regionsMu.Lock()
	defer q.regionsMu.Unlock()
	for i, mr := range q.mrs {
		if mr.Addr() == r.Addr && mr.LKey() == r.LKey {
			if err := mr.Close(); err != nil {
				return err // kept: destroy tries again
			}
			q.mrs = append(q.mrs[:i], q.mrs[i+1:]...)
			return nil
		}
	}
	return errors.New("rnet: " + q.device + ": retired region not registered")
}

func mrRegion(mr *verbs.MR) ring.Region {
	return ring.Region{Buf: mr.Bytes(), Addr: mr.Addr(), LKey: mr.LKey(), RKey: mr.RKey()}
}

// path fills in the device's part of info from the queue pair as the
// device reports it now, which is what is in effect.
func (q *verbsQP) path(info *ConnInfo) error {
	d := q.deviceInfo
	info.Transport = d.Transport.String()
	info.Device = q.device
	info.MaxInlineData = int(q.qp.Caps().MaxInlineData)
	info.QPNumber = q.qp.Num()
	if q.released.Load() {
		// A failed path given back while the connection resumes: what
		// the device would say of it is gone, and moot.
		return nil
	}
	p, err := q.qp.Path()
	if err == nil {
		var a verbs.QPAttrs
		if a, err = q.qp.Attrs(); err == nil {
			q.fillPath(info, p, a)
			return nil
		}
	}
	if q.released.Load() {
		return nil // released while it asked
	}
	return err
}

// fillPath fills in info from the queue pair's path and attributes.
func (q *verbsQP) fillPath(info *ConnInfo, p verbs.QPPath, a verbs.QPAttrs) {
	d := q.deviceInfo
	info.Port, info.PathMTU, info.GIDIndex = p.Port, p.PathMTU, p.GIDIndex
	info.QPNumber, info.RemoteQPNumber = q.qp.Num(), p.DestQPNum
	info.ServiceLevel = int(p.ServiceLevel)
	if p.GlobalRoute {
		info.TrafficClass = int(p.TrafficClass)
	}
	info.GID = portGID(d, p.Port, p.GIDIndex)
	if d.Transport != verbs.TransportIWARP {
		if a.AckTimeout != 0 {
			info.AckTimeout = ackTimeoutUnit << a.AckTimeout
		}
		info.RetryCount, info.RNRRetryCount = int(a.RetryCount), int(a.RNRRetry)
	} else {
		info.PathMTU = 0 // siw reports one, though TCP segments the stream
	}
}

// portGID is the GID at index of a port's table, or the zero Addr.
func portGID(d verbs.DeviceInfo, port, index int) netip.Addr {
	for _, pi := range d.Ports {
		if pi.Num != port {
			continue
		}
		for _, g := range pi.GIDs {
			if g.Index == index {
				return netip.AddrFrom16(g.GID)
			}
		}
	}
	return netip.Addr{}
}
