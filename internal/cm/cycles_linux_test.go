//go:build cgo

package cm

import (
	"net/netip"
	"testing"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// After many connect/destroy cycles, nothing is left behind: not a file
// descriptor, not a QP, CQ, MR, PD or cm_id in the kernel.
func TestCyclesLeaveNoResources(t *testing.T) {
	addrs := rdmatest.Require(t)
	cycles := 200
	if testing.Short() {
		cycles = 20
	}
	ctx := testCtx(t)
	// One warm-up cycle: librdmacm opens its devices (and their fds) once
	// per process and keeps them.
	connect(t, ctx, addrs.Client, addrs.Server, []byte("warm-up")).close(t)
	fds, res := procstat.OpenFDs(t), procstat.Resources(t)
	t.Logf("start: %d fds, rdma resources %v", fds, res)
	for i := 0; i < cycles; i++ {
		p := connect(t, ctx, addrs.Client, addrs.Server, []byte("cycle"))
		if i == 0 {
			// The counts must see this process's objects, or the
			// final comparison proves nothing: two QPs, CQs and MRs,
			// three cm ids (listener, client, server), and at least
			// our two PDs (librdmacm adds a default PD per device
			// while ids use it).
			up := procstat.Resources(t)
			t.Logf("one connection up: rdma resources %v", up)
			for k, d := range map[string]int{"qp": 2, "cq": 2, "mr": 2, "cm_id": 3} {
				if up[k] != res[k]+d {
					t.Errorf("with one connection up, %s = %d, want %d", k, up[k], res[k]+d)
				}
			}
			if up["pd"] < res["pd"]+2 {
				t.Errorf("with one connection up, pd = %d, want at least %d", up["pd"], res["pd"]+2)
			}
		}
		if i%2 == 0 { // half with an orderly disconnect, half torn down directly
			p.disconnect(t, ctx)
		}
		p.close(t)
		if t.Failed() {
			t.Fatalf("cycle %d failed", i)
		}
	}
	// The kernel may release some objects asynchronously (rxe cleans QPs
	// up from a work queue): re-read until the counts settle, bounded.
	var now map[string]int
	for range 50 {
		now = procstat.Resources(t)
		if sameCounts(res, now) {
			break
		}
	}
	t.Logf("after %d cycles: %d fds, rdma resources %v", cycles, procstat.OpenFDs(t), now)
	if got := procstat.OpenFDs(t); got != fds {
		t.Errorf("open fds %d, was %d", got, fds)
	}
	if !sameCounts(res, now) {
		t.Errorf("rdma resources %v, were %v", now, res)
	}
}

func sameCounts(a, b map[string]int) bool {
	for _, k := range []string{"qp", "cq", "mr", "pd", "cm_id"} {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

// IPv6, where the lab configures it: resolve, connect, read addresses back.
// The client gives no source address: the lab serves IPv6 between its two
// local addresses by rxe loopback on one device, which routing picks.
func TestConnectIPv6(t *testing.T) {
	addrs := rdmatest.Require6(t)
	ctx := testCtx(t)
	p := connect(t, ctx, netip.Addr{}, addrs.Server, []byte("v6"))
	defer p.close(t)
	if got := p.client.id.RemoteAddr(); got != p.serverAddr || !got.Addr().Is6() {
		t.Errorf("client RemoteAddr %v, want %v", got, p.serverAddr)
	}
	if got, want := p.server.id.RemoteAddr(), p.client.id.LocalAddr(); got != want || !got.Addr().Is6() {
		t.Errorf("server RemoteAddr %v, client LocalAddr %v", got, want)
	}
	if p.serverAddr.Addr() != addrs.Server || p.serverAddr.Port() == 0 {
		t.Errorf("listener address %v", p.serverAddr)
	}
	t.Logf("IPv6 connection %v -> %v on %s / %s", p.client.id.LocalAddr(), p.serverAddr,
		p.client.pd.Context().Name(), p.server.pd.Context().Name())
	p.disconnect(t, ctx)
}
