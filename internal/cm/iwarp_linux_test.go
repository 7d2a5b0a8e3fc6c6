//go:build cgo

package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
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
// waiting there used to make the kernel restart the call, which then failed
// with EINVAL, EADDRNOTAVAIL or ECONNREFUSED: a CI failure once in a few
// full device runs. With the link slowed so that the wait is long, each
// connect here is signalled while its thread waits in the kernel, and must
// still be established.
func TestIWARPConnectSignalled(t *testing.T) {
	addrs := rdmatest.RequireIWARP(t)
	if os.Getenv("RNET_GUEST") != "1" {
		t.Skip("slows a network interface with netem: only inside the Soft-RoCE lab (scripts/softroce-vm)")
	}
	dev := egressInterface(t, addrs.Client, addrs.Server)
	if dev == "lo" {
		t.Skip("the lab short-cuts local traffic (RNET_VM_WIRE=0): netem on lo would slow every test")
	}
	delayLink(t, dev, "20ms")
	ctx := testCtx(t)
	// Not every restarted connect failed (the kernel's retry sometimes
	// came through), so it takes a run of them to show the fault.
	const connects = 20
	signalled := 0
	for range connects {
		if connectSignalled(t, ctx, addrs) {
			signalled++
		}
	}
	// A connect that ended before its signal proves nothing; twenty that
	// each wait 20 ms for the link cannot all have.
	if signalled == 0 {
		t.Fatal("no connect was signalled while it waited in rdma_connect")
	}
	t.Logf("%d of %d connects signalled while they waited in rdma_connect", signalled, connects)
}

// connectSignalled connects while signalConnectWait watches, and reports
// whether the connect was signalled.
func connectSignalled(t *testing.T, ctx context.Context, addrs rdmatest.Pair) bool {
	stop := signalConnectWait()
	defer stop()
	p := connectRecv(t, ctx, addrs.Client, addrs.Server, []byte("signalled"), true)
	signalled := stop()
	p.disconnect(t, ctx)
	p.close(t)
	return signalled
}

// signalConnectWait sends SIGURG to the thread that waits in the kernel in
// rdma_connect (in write(2) on the connection manager's device, inside a
// cgo call from (*ID).Connect), once one does. The returned stop ends the
// watch and reports whether the signal went out; it may be called again.
func signalConnectWait() (stop func() bool) {
	quit := make(chan struct{})
	sent := make(chan bool, 1)
	go func() {
		for {
			select {
			case <-quit:
				sent <- false
				return
			default:
			}
			if threadInCMWrite() != 0 && inCgoCall("(*ID).Connect") {
				if tid := threadInCMWrite(); tid != 0 {
					sent <- syscall.Tgkill(os.Getpid(), tid, syscall.SIGURG) == nil
					return
				}
			}
			runtime.Gosched()
		}
	}()
	var once sync.Once
	var result bool
	return func() bool {
		once.Do(func() {
			close(quit)
			result = <-sent
		})
		return result
	}
}

// threadInCMWrite returns a thread of this process that is in write(2) on
// the connection manager's device, or 0.
func threadInCMWrite() int {
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/syscall")
		f := strings.Fields(string(b)) // the call's number, then its arguments in hex
		if err != nil || len(f) < 2 || f[0] != strconv.Itoa(syscall.SYS_WRITE) {
			continue
		}
		fd, err := strconv.ParseUint(f[1], 0, 31)
		if err != nil {
			continue
		}
		if dst, _ := os.Readlink("/proc/self/fd/" + strconv.FormatUint(fd, 10)); dst == "/dev/infiniband/rdma_cm" {
			tid, _ := strconv.Atoi(task.Name())
			return tid
		}
	}
	return 0
}

// egressInterface names the interface traffic from src to dst leaves by.
func egressInterface(t *testing.T, src, dst netip.Addr) string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "route", "get", dst.String(), "from", src.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route get %v from %v: %v: %s", dst, src, err, out)
	}
	f := strings.Fields(string(out))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "dev" {
			return f[i+1]
		}
	}
	t.Fatalf("ip route get %v from %v names no interface: %s", dst, src, out)
	return ""
}

// delayLink delays what leaves dev, with netem, until the test ends.
func delayLink(t *testing.T, dev, delay string) {
	t.Helper()
	if out, err := exec.Command("tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", delay).CombinedOutput(); err != nil {
		t.Fatalf("tc qdisc add dev %s root netem delay %s: %v: %s", dev, delay, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("tc", "qdisc", "del", "dev", dev, "root").CombinedOutput(); err != nil {
			t.Errorf("tc qdisc del dev %s root: %v: %s", dev, err, out)
		}
	})
}
