package rnet

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/pollgroup"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Poll groups over the simulated fabric: internal/pollgroup (dispatch by
// queue pair number, members polling the shared CQ, leaving) driven by
// whole Conns on machines without RDMA.

// simGroupQP is simqp.QP whose completions go through a poll group: its
// endpoint completes into the group's shared CQ, and step, wait and kick
// are its pollgroup.Member's, as verbsQP's are on a device.
type simGroupQP struct {
	*simqp.QP
	readiedPeer bool // as simqp.QP's, for the yield below
	f           *simfabric.Fabric
	cq          *simfabric.CQ
	member      *pollgroup.Member
}

// Step is the member's Step, with simqp.QP's yield after a spinning Step that
// moved something (see simqp.QP.Step): the peer it readied runs on this P.
func (q *simGroupQP) Step(flags verbs.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	n, err := q.member.Step(recvs, sends, out, tries)
	moved := n > 0 || len(recvs) > 0 || len(sends) > 0
	if tries > 1 && (moved || q.readiedPeer) {
		q.readiedPeer = false
		runtime.Gosched()
	} else if tries == 1 && moved {
		q.readiedPeer = true
	}
	return n, err
}

func (q *simGroupQP) Wait() (bool, error)  { return q.member.Wait() }
func (q *simGroupQP) Kick()                { q.member.Kick() }
func (q *simGroupQP) NeedSends(need bool)  { q.member.NeedSends(need) }
func (q *simGroupQP) Dispatches() uint64   { return q.member.Dispatches() }
func (q *simGroupQP) Collected() bool      { return q.member.Collected() }
func (q *simGroupQP) CollectAll()          { q.member.CollectAll() }
func (q *simGroupQP) TrySpin() bool        { return q.member.TrySpin() }
func (q *simGroupQP) EndSpin()             { q.member.EndSpin() }
func (q *simGroupQP) SpinWokeOthers() bool { return q.member.SpinWokeOthers() }

func (q *simGroupQP) Shutdown() {
	q.member.Stop()
	q.QP.Shutdown()
}

// Destroy destroys the queue pair (the endpoint vanishes: nothing of it
// completes any more, and what its peer sends fails), then leaves the
// group, in verbsQP.Destroy's order.
func (q *simGroupQP) Destroy() error {
	q.f.Kill(q.Endpoint())
	return q.member.Leave(nil)
}

// simGroupNet is n connected pairs of Conns over one simulated fabric,
// whose client ends all share one poll group and server ends another (or
// the same one).
type simGroupNet struct {
	f                    *simfabric.Fabric
	clientCQ, serverCQ   *simqp.GroupCQ
	clientGr, serverGr   *pollgroup.Group
	clients, servers     []*Conn
	clientQPs, serverQPs []*simGroupQP
}

// simGroupOptions shape a simGroupNet.
type simGroupOptions struct {
	cfg       *Config
	oneGroup  bool // both ends of every pair in one group
	armedCQ   bool // CQ events only after an arm, as on a device
	cqEntries int  // default: room for every member
	// reapDelay, if not 0, is the connections' cork window (see
	// stream.Settings.ReapDelay).
	reapDelay time.Duration
}

// simGroupPipes makes n connected pairs of Conns whose client ends share a
// poll group, and whose server ends share another, or the same one.
func simGroupPipes(tb testing.TB, n int, o simGroupOptions) *simGroupNet {
	tb.Helper()
	set := o.cfg.settings()
	if o.reapDelay != 0 {
		set.reapDelay = o.reapDelay
	}
	layout := set.ring.Layout()
	caps := simfabric.Caps{SendDepth: layout.SendDepth, RecvDepth: layout.RecvDepth, MaxInline: 256}
	f := simfabric.New(1, simfabric.Options{Auto: true, DirectLanding: true})
	entries := o.cqEntries
	if entries == 0 {
		entries = 2 * n * layout.CQDepth
	}
	newGroup := func() (*simqp.GroupCQ, *pollgroup.Group) {
		cq := simqp.NewGroupCQ(f.NewCQ(simfabric.CQOptions{Entries: entries, Armed: o.armedCQ, SplitArm: o.armedCQ}), pollgroup.ErrInterrupted)
		return cq, pollgroup.New(cq, nil)
	}
	sn := &simGroupNet{f: f}
	sn.clientCQ, sn.clientGr = newGroup()
	sn.serverCQ, sn.serverGr = sn.clientCQ, sn.clientGr
	if !o.oneGroup {
		sn.serverCQ, sn.serverGr = newGroup()
	}
	// Every member reserves before any Conn starts, so that no group sees
	// its last member leave (and closes) while the others are still
	// joining.
	type pairPlan struct{ mc, ms *pollgroup.Member }
	plans := make([]pairPlan, n)
	for i := range plans {
		var ok1, ok2 bool
		plans[i].mc, ok1 = sn.clientGr.Reserve(layout.CQDepth, layout.CQDepth, 0)
		plans[i].ms, ok2 = sn.serverGr.Reserve(layout.CQDepth, layout.CQDepth, 0)
		if !ok1 || !ok2 {
			tb.Fatalf("pair %d: the poll group's CQ of %d entries has no room for %d more", i, entries, layout.CQDepth)
		}
	}
	newEngine := func(ep *simfabric.Endpoint) *ring.Engine {
		eng, err := ring.New(set.ring,
			ep.Register(make([]byte, layout.SendRegion), false),
			ep.Register(make([]byte, layout.RecvRegion), true),
			ep.Register(make([]byte, layout.TargetRegion), true))
		if err != nil {
			tb.Fatal(err)
		}
		if err := ep.PostRecv(eng.PostRecvs(nil)); err != nil {
			tb.Fatal(err)
		}
		return eng
	}
	newQP := func(ep *simfabric.Endpoint, cq *simqp.GroupCQ, m *pollgroup.Member, local, remote string) *simGroupQP {
		q := &simGroupQP{QP: simqp.New(ep, netAddr(netip.MustParseAddrPort(local)), netAddr(netip.MustParseAddrPort(remote))), f: f, cq: cq.CQ, member: m}
		m.Attach(simqp.GroupEndpoint{Endpoint: ep, CQ: cq.CQ}, nil)
		return q
	}
	for i, p := range plans {
		a, b := f.PairOn(caps, caps, sn.clientCQ.CQ, sn.serverCQ.CQ)
		ea, eb := newEngine(a), newEngine(b)
		pa, pb := ea.LocalConnData(), eb.LocalConnData()
		if err := ea.Establish(pb[:]); err != nil {
			tb.Fatal(err)
		}
		if err := eb.Establish(pa[:]); err != nil {
			tb.Fatal(err)
		}
		client := fmt.Sprintf("10.0.%d.%d:40000", i/250, i%250+1)
		qa := newQP(a, sn.clientCQ, p.mc, client, "10.1.0.1:7471")
		qb := newQP(b, sn.serverCQ, p.ms, "10.1.0.1:7471", client)
		simqp.Connect(qa.QP, qb.QP)
		sn.clientQPs = append(sn.clientQPs, qa)
		sn.serverQPs = append(sn.serverQPs, qb)
		sn.clients = append(sn.clients, newConn(qa, ea, set))
		sn.servers = append(sn.servers, newConn(qb, eb, set))
	}
	return sn
}

// closeAll closes every Conn, concurrently, as a server's connections end.
func (sn *simGroupNet) closeAll() {
	var wg sync.WaitGroup
	for _, cs := range [][]*Conn{sn.clients, sn.servers} {
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.Close()
			}()
		}
	}
	wg.Wait()
}

// groups returns the net's poll groups with their CQs: two, or one.
func (sn *simGroupNet) groups() ([]*pollgroup.Group, []*simqp.GroupCQ) {
	if sn.serverGr == sn.clientGr {
		return []*pollgroup.Group{sn.clientGr}, []*simqp.GroupCQ{sn.clientCQ}
	}
	return []*pollgroup.Group{sn.clientGr, sn.serverGr}, []*simqp.GroupCQ{sn.clientCQ, sn.serverCQ}
}

// checkGroupsGone checks, once every Conn is closed, that each group's
// CQ was destroyed, and that no completion
// was dispatched to nobody: a queue pair number that found no member means
// a completion lost to its connection.
func (sn *simGroupNet) checkGroupsGone(t *testing.T) {
	t.Helper()
	gs, cqs := sn.groups()
	for i, g := range gs {
		select {
		case <-cqs[i].Destroyed():
		case <-time.After(time.Minute): // a hang detector only
			t.Fatalf("poll group %d: CQ still there a minute after its last member left", i)
		}
		if strays, closed := g.Strays(), g.Closed(); strays != 0 || !closed {
			t.Errorf("poll group %d: %d completions for no member, closed %v", i, strays, closed)
		}
	}
}
