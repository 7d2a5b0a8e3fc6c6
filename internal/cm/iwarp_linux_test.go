//go:build cgo

package cm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// iWARP (siw) cannot write with immediate, so rsocket sends its message word
// as a 4-byte inline SEND into a receive with one SGE. Check that path, and
// what refusal looks like on iWARP.
func TestIWARPSendInlineAndRefused(t *testing.T) {
	addrs := rdmatest.RequireIWARP(t)
	ctx := testCtx(t)

	dst := unusedPort(t, addrs.Server)
	ch, id := dialID(t, ctx, addrs.Client, dst)
	e := newEndpoint(t, id, verbs.AccessLocalWrite)
	// siw makes the TCP connection inside rdma_connect, so a refusal may
	// come back from the call itself rather than as an event.
	err := id.Connect(RsocketConnParam(nil))
	if err == nil {
		var ev Event
		ev, err = id.Await(ctx, EventEstablished)
		t.Logf("iWARP connect with no listener: event %v status %d: %v", ev.Type, ev.Status, err)
	} else {
		t.Logf("iWARP connect with no listener: rdma_connect itself failed: %v", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, ErrUnreachable) {
		t.Errorf("got %v, want refused or unreachable", err)
	}
	e.close(t)
	ch.Close()

	// siw refuses a receive without SGE (EINVAL from ibv_post_recv), so
	// the first receive carries a 4-byte SGE.
	p := connectRecv(t, ctx, addrs.Client, addrs.Server, []byte("iwarp"), true)
	defer p.close(t)
	t.Logf("iWARP QP granted %+v on %s", p.client.qp.Caps(), p.client.pd.Context().Name())
	sbuf, rbuf := p.client.mr, p.server.mr
	binary.NativeEndian.PutUint32(sbuf.Bytes(), 0x20000010) // a message word in host order, as rsocket sends it
	if _, err := p.client.qp.PostSend([]wr.Send{{ID: 3, Op: wr.OpSend, Inline: true, Signaled: true, NumSGE: 1,
		SGE: [2]wr.SGE{{Addr: sbuf.Addr(), Length: 4, LKey: sbuf.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if wc := p.client.completion(t, ctx); wc.Status != wr.WCSuccess || wc.ID != 3 {
		t.Fatalf("send completion %+v", wc)
	}
	if wc := p.server.completion(t, ctx); wc.Status != wr.WCSuccess || wc.Opcode != wr.WCRecv || wc.ByteLen != 4 || wc.ID != 1 {
		t.Fatalf("receive completion %+v", wc)
	}
	// Write with immediate is not supported on siw: the post fails.
	_, err = p.client.qp.PostSend([]wr.Send{{ID: 4, Op: wr.OpWriteImm, Imm: 1, Signaled: true,
		RemoteAddr: rbuf.Addr(), RKey: rbuf.RKey()}})
	t.Logf("RDMA WRITE WITH IMMEDIATE on siw: %v", err)
	if err == nil {
		t.Error("RDMA WRITE WITH IMMEDIATE was posted on siw, which has no such operation")
	}
	if got := rbuf.Bytes()[4096:4100]; !bytes.Equal(got, sbuf.Bytes()[:4]) {
		t.Fatalf("received %x, want %x", got, sbuf.Bytes()[:4])
	}
	p.disconnect(t, ctx)
}

// siw makes its TCP connection inside rdma_connect. A signal to the thread
// waiting there (Go preempts with SIGURG) used to make the kernel restart
// the call, which then failed with EINVAL, EADDRNOTAVAIL or ECONNREFUSED:
// it was a CI failure, once in a few full device runs. With the link slowed
// so that the wait is long, each connect here is signalled during it and
// must still be established.
func TestIWARPConnectSignalled(t *testing.T) {
	addrs := rdmatest.RequireIWARP(t)
	delayLink(t, addrs.Client, "20ms")
	ctx := testCtx(t)
	signalled := 0
	for range 5 {
		stop := signalDuringCgoCall("(*ID).Connect")
		p := connectRecv(t, ctx, addrs.Client, addrs.Server, []byte("signalled"), true)
		if stop() {
			signalled++
		}
		p.disconnect(t, ctx)
		p.close(t)
	}
	// A connect that ended before the signal proves nothing; five that
	// each wait 20 ms for the link cannot all have.
	if signalled == 0 {
		t.Fatal("no connect was signalled while it waited in rdma_connect")
	}
	t.Logf("%d of 5 connects signalled inside rdma_connect", signalled)
}

// signalDuringCgoCall sends SIGURG to every thread of the process once a
// goroutine is inside a cgo call made from fn. The returned stop ends the
// watch and reports whether the signal went out.
func signalDuringCgoCall(fn string) (stop func() bool) {
	quit := make(chan struct{})
	sent := make(chan bool, 1)
	go func() {
		for !inCgoCall(fn) {
			select {
			case <-quit:
				sent <- false
				return
			default:
				runtime.Gosched()
			}
		}
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			if tid, err := strconv.Atoi(task.Name()); err == nil {
				syscall.Tgkill(os.Getpid(), tid, syscall.SIGURG)
			}
		}
		sent <- true
	}()
	return func() bool {
		close(quit)
		return <-sent
	}
}

// delayLink delays what leaves the interface that holds addr, with netem,
// until the test ends.
func delayLink(t *testing.T, addr netip.Addr, delay string) {
	t.Helper()
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("tc (iproute2) is needed to slow the link")
	}
	dev := interfaceOf(t, addr)
	if out, err := exec.Command("tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", delay).CombinedOutput(); err != nil {
		t.Fatalf("tc qdisc add dev %s root netem delay %s: %v: %s", dev, delay, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("tc", "qdisc", "del", "dev", dev, "root").CombinedOutput(); err != nil {
			t.Errorf("tc qdisc del dev %s root: %v: %s", dev, err, out)
		}
	})
}

// interfaceOf names the network interface that holds addr.
func interfaceOf(t *testing.T, addr netip.Addr) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifs {
		as, _ := ifc.Addrs()
		for _, a := range as {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr() == addr {
				return ifc.Name
			}
		}
	}
	t.Fatalf("no interface holds %v", addr)
	return ""
}
