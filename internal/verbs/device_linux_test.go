//go:build cgo

package verbs

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/wr"

	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// deviceFor finds the device with a GID for addr.
func deviceFor(t testing.TB, devs []DeviceInfo, addr netip.Addr) (DeviceInfo, PortInfo, GIDEntry) {
	t.Helper()
	for _, d := range devs {
		for _, p := range d.Ports {
			for _, g := range p.GIDs {
				if g.Addr == addr {
					return d, p, g
				}
			}
		}
	}
	t.Fatalf("no device has a GID for %v in %+v", addr, devs)
	return DeviceInfo{}, PortInfo{}, GIDEntry{}
}

func openFor(t testing.TB, addr netip.Addr) *Context {
	t.Helper()
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	d, _, _ := deviceFor(t, devs, addr)
	ctx, err := Open(d.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

func TestDevicesListsRoCEDevicesWithGIDs(t *testing.T) {
	p := rdmatest.Require(t)
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		t.Logf("%s guid %s %s fw %q max_qp_wr %d max_sge %d max_cqe %d max_inline(probed) %d",
			d.Name, d.NodeGUID, d.Transport, d.FWVersion, d.MaxQPWR, d.MaxSGE, d.MaxCQE, d.MaxInlineData)
		for _, pt := range d.Ports {
			t.Logf("  port %d %s %s active_mtu %d gids %d/%d", pt.Num, pt.State, pt.LinkLayer, pt.ActiveMTU, len(pt.GIDs), pt.GIDTableLen)
			for _, g := range pt.GIDs {
				t.Logf("    gid[%d] %s %s -> %v (ifindex %d)", g.Index, netip.AddrFrom16(g.GID), g.Type, g.Addr, g.Ifindex)
			}
		}
	}
	for _, addr := range []netip.Addr{p.Server, p.Client} {
		d, port, g := deviceFor(t, devs, addr)
		if d.Transport != TransportRoCE && d.Transport != TransportInfiniBand {
			t.Errorf("%s: transport %v", d.Name, d.Transport)
		}
		if port.State != PortActive {
			t.Errorf("%s port %d: state %v, want ACTIVE", d.Name, port.Num, port.State)
		}
		if port.ActiveMTU < 256 || d.MaxQPWR <= 0 || d.MaxSGE < 2 || d.MaxCQE <= 0 || d.MaxInlineData <= 0 {
			t.Errorf("%s: implausible limits %+v / %+v", d.Name, d, port)
		}
		if d.NodeGUID == (GUID{}) {
			t.Errorf("%s: zero node GUID", d.Name)
		}
		if addr.Is4() && g.Type != GIDTypeRoCEv1 && g.Type != GIDTypeRoCEv2 {
			t.Errorf("%s: GID for %v has type %v", d.Name, addr, g.Type)
		}
	}
	if ds, _, _ := deviceFor(t, devs, p.Server); ds.Name == func() string { d, _, _ := deviceFor(t, devs, p.Client); return d.Name }() {
		t.Logf("server and client share device %s", ds.Name)
	}
}

// serverPD allocates a PD on the lab server address's device, closed when
// the test ends (Close is idempotent).
func serverPD(t *testing.T) *PD {
	t.Helper()
	p := rdmatest.Require(t)
	pd, err := openFor(t, p.Server).AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Close() })
	return pd
}

func TestMRAccessFlags(t *testing.T) {
	pd := serverPD(t)
	mr, err := pd.RegisterMR(100, AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Access()&AccessRemoteRead != 0 || mr.Access() != AccessLocalWrite|AccessRemoteWrite {
		t.Errorf("access %v, want LOCAL_WRITE|REMOTE_WRITE", mr.Access())
	}
	if len(mr.Bytes()) != 100 || mr.Len() != 100 || mr.Addr() == 0 {
		t.Errorf("bytes %d len %d addr %#x", len(mr.Bytes()), mr.Len(), mr.Addr())
	}
	mr.Bytes()[99] = 1 // mapped and writable
	local, err := pd.RegisterMR(4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	if local.Access() != 0 {
		t.Errorf("default access %v, want none", local.Access())
	}
	// A PD with regions cannot go, and stays usable.
	if err := pd.Close(); err == nil {
		t.Error("PD closed under its MRs")
	}
	for _, m := range []*MR{mr, local} {
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if m.Bytes() != nil || m.Addr() != 0 {
			t.Error("memory still visible after Close")
		}
	}
	if err := pd.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegisterMR(10, 0); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("RegisterMR on closed PD: %v", err)
	}
}

// Deregister gives the registration back and keeps the bytes: the PD can
// then go, the bytes stay readable until Close, and both are idempotent.
func TestMRDeregisterKeepsTheMemory(t *testing.T) {
	pd := serverPD(t)
	mr, err := pd.RegisterMR(4096, AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	copy(mr.Bytes(), "held for a resume")
	before := ReadResources()
	for range 2 {
		if err := mr.Deregister(); err != nil {
			t.Fatal(err)
		}
	}
	if after := ReadResources(); after.MRs != before.MRs-1 || after.RegisteredBytes != before.RegisteredBytes-4096 {
		t.Errorf("held after Deregister: %+v, before %+v: want one region and its 4096 bytes fewer", after, before)
	}
	if err := pd.Close(); err != nil {
		t.Fatalf("PD Close after its only region was deregistered: %v", err)
	}
	if got := string(mr.Bytes()[:17]); got != "held for a resume" || mr.Addr() == 0 {
		t.Errorf("after Deregister the bytes read %q at %#x, want them kept", got, mr.Addr())
	}
	for range 2 {
		if err := mr.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if mr.Bytes() != nil {
		t.Error("memory still visible after Close")
	}
}

func TestCQWaitDeadlineContextAndClose(t *testing.T) {
	p := rdmatest.Require(t)
	ctx := openFor(t, p.Server)
	ch, err := ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.NewCQ(16, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	var wc [4]wr.Completion
	if n, err := cq.Poll(wc[:]); n != 0 || err != nil {
		t.Fatalf("Poll on empty CQ = %d, %v", n, err)
	}
	ch.SetDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := ch.Wait(context.Background()); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Wait = %v, want deadline", err)
	}
	if _, err := ch.WaitReady(context.Background()); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WaitReady = %v, want deadline", err)
	}
	ch.SetDeadline(time.Time{})

	// Taking an event needs the CQ to be alone on its channel.
	var noQP QP
	other, err := ctx.NewCQ(4, ch)
	if err != nil {
		t.Fatal(err)
	}
	for _, flags := range []StepFlags{StepTakeEvent, StepTakeEvent | StepArm} {
		if _, err := noQP.Step(cq, flags, nil, nil, wc[:], 1); !errors.Is(err, ErrSharedChannel) {
			t.Fatalf("Step(%#x) with two CQs on the channel = %v, want ErrSharedChannel", flags, err)
		}
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := noQP.Step(cq, StepTakeEvent, nil, nil, wc[:], 1); errors.Is(err, ErrSharedChannel) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Step(StepTakeEvent) with the CQ alone, on a closed QP = %v, want net.ErrClosed", err)
	}
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	procstat.StartParked(t, func() { _, err := ch.Wait(c); done <- err })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	procstat.StartParked(t, func() { _, err := ch.Wait(context.Background()); done <- err })
	if err := ch.Close(); err != nil { // the CQ still exists: destruction is deferred
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Wait = %v, want net.ErrClosed", err)
	}
	if err := cq.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cq.Poll(wc[:]); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Poll after Close = %v", err)
	}
	if err := cq.ReqNotify(false); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReqNotify after Close = %v", err)
	}
	if _, err := ctx.NewCQ(4, ch); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("NewCQ on closed channel = %v", err)
	}
}

// 1000 goroutines waiting on 1000 completion channels park in the netpoller
// and need no OS thread each.
func TestCompChannel1000WaitersFewThreads(t *testing.T) {
	p := rdmatest.Require(t)
	ctx := openFor(t, p.Server)
	const n = 1000
	chs := make([]*CompChannel, n)
	cqs := make([]*CQ, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	base := procstat.NetpollWaiters()
	for i := range chs {
		ch, err := ctx.NewCompChannel()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := ctx.NewCQ(4, ch)
		if err != nil {
			t.Fatal(err)
		}
		if err := cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		chs[i], cqs[i] = ch, cq
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := ch.Wait(context.Background())
			errs <- err
		}()
	}
	procstat.WaitParked(t, base+n)
	th := procstat.OSThreads(t)
	t.Logf("%d goroutines waiting on completion channels, %d OS threads", n, th)
	if th >= procstat.ThreadLimit() {
		t.Errorf("%d OS threads, want < %d", th, procstat.ThreadLimit())
	}
	for i := range chs {
		chs[i].Close()
		if err := cqs[i].Close(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("waiter: %v", err)
		}
	}
}
