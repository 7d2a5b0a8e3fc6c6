//go:build cgo

package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// siw makes its TCP connection inside rdma_connect. A signal that reaches
// the thread waiting there ends the wait and the kernel restarts the call,
// which then fails with EINVAL, EADDRNOTAVAIL or ECONNREFUSED, though not
// every time: counting failed connects would show the fault only by chance,
// so this test checks what prevents it, that the signal stays blocked (see
// rnet_connect). The client's TCP SYNs are dropped (a tc filter) while each
// connect is made, so that its thread is certain to be waiting in the kernel
// when the test finds it there, however slow the machine. The test then
// sends that thread SIGURG (Go's preemption signal), and the signal must
// stay pending, blocked, while the thread still waits: it cannot end the
// wait. Then the SYNs pass again, and the connect must be established.
func TestIWARPConnectSignalled(t *testing.T) {
	addrs := rdmatest.RequireIWARP(t)
	if os.Getenv("RNET_GUEST") != "1" {
		t.Skip("filters a network interface with tc: only inside the Soft-RoCE lab (scripts/softroce-vm)")
	}
	dev := egressInterface(t, addrs.Client, addrs.Server)
	if dev == "lo" {
		t.Skip("the lab short-cuts local traffic (RNET_VM_WIRE=0): holding SYNs on lo would hold every local connect")
	}
	hold := newSYNHold(t, dev)
	ctx := testCtx(t)
	// Every connect is checked, so a few show it; each waits about a
	// second, for TCP to send its SYN again after the hold ends.
	for i := range 3 {
		connectHeldAndSignalled(t, ctx, addrs, hold, i)
	}
}

// connectHeldAndSignalled makes one connect while its SYNs are held, has
// watchHeldConnect signal its thread in the kernel and end the hold, and
// checks what the watch saw.
func connectHeldAndSignalled(t *testing.T, ctx context.Context, addrs rdmatest.Pair, hold *synHold, i int) {
	// The connect runs on this thread, so the watch knows which to signal.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := syscall.Gettid()
	hold.start(t)
	quit := make(chan struct{})
	seen := make(chan heldConnect, 1)
	go func() { seen <- watchHeldConnect(tid, hold, quit) }()
	defer func() {
		// Also when connectRecv fails the test: say what the watch saw.
		close(quit)
		w := <-seen
		switch {
		case w.err != nil:
			t.Errorf("connect %d: %v", i, w.err)
		case !w.signalled:
			t.Errorf("connect %d: ended before its thread was seen waiting in rdma_connect, with its SYNs held", i)
		case !w.blocked || !w.pending || !w.stillWaiting:
			t.Errorf("connect %d: SIGURG sent to the thread waiting in rdma_connect: blocked %v, pending %v, thread still waiting %v; want all true (a signal that reaches the thread ends the kernel's wait, and the call restarts)",
				i, w.blocked, w.pending, w.stillWaiting)
		default:
			t.Logf("connect %d: SIGURG sent to its thread while it waited in rdma_connect stayed blocked and pending", i)
		}
	}()
	p := connectRecv(t, ctx, addrs.Client, addrs.Server, []byte("signalled"), true)
	p.disconnect(t, ctx)
	p.close(t)
}

// heldConnect is what watchHeldConnect saw.
type heldConnect struct {
	signalled    bool // SIGURG went to the thread while it waited in rdma_connect
	blocked      bool // the thread had SIGURG blocked
	pending      bool // and SIGURG was pending on it after the signal
	stillWaiting bool // and it still waited in the kernel
	err          error
}

// watchHeldConnect waits until thread tid waits in the kernel inside
// rdma_connect (in write(2) on the connection manager's device, in a cgo
// call from (*ID).Connect), sends it SIGURG, reads the thread's signal
// state, and ends the hold. With the SYNs held, the connect cannot end
// before the hold does, so the watch always finds it waiting. It gives up
// when quit is closed.
func watchHeldConnect(tid int, hold *synHold, quit <-chan struct{}) (w heldConnect) {
	defer func() {
		if err := hold.end(); err != nil && w.err == nil {
			w.err = err
		}
	}()
	pause := time.NewTicker(time.Millisecond)
	defer pause.Stop()
	for !inCgoCall("(*ID).Connect") || !inCMWrite(tid) {
		select {
		case <-quit:
			return w
		case <-pause.C:
		}
	}
	if err := syscall.Tgkill(os.Getpid(), tid, syscall.SIGURG); err != nil {
		w.err = fmt.Errorf("tgkill %d SIGURG: %w", tid, err)
		return w
	}
	w.signalled = true
	blocked, pending, err := threadSignals(tid)
	if err != nil {
		w.err = err
		return w
	}
	urg := uint64(1) << (syscall.SIGURG - 1)
	w.blocked, w.pending = blocked&urg != 0, pending&urg != 0
	w.stillWaiting = inCMWrite(tid)
	return w
}

// inCMWrite reports whether thread tid of this process is in write(2) on
// the connection manager's device.
func inCMWrite(tid int) bool {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
	f := strings.Fields(string(b)) // the call's number, then its arguments in hex
	if err != nil || len(f) < 2 || f[0] != strconv.Itoa(syscall.SYS_WRITE) {
		return false
	}
	fd, err := strconv.ParseUint(f[1], 0, 31)
	if err != nil {
		return false
	}
	dst, _ := os.Readlink("/proc/self/fd/" + strconv.FormatUint(fd, 10))
	return dst == "/dev/infiniband/rdma_cm"
}

// threadSignals reads thread tid's blocked and pending (thread-directed)
// signal masks.
func threadSignals(tid int) (blocked, pending uint64, err error) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || name != "SigBlk" && name != "SigPnd" {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(value), 16, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("thread %d status %s: %w", tid, name, err)
		}
		if name == "SigBlk" {
			blocked = mask
		} else {
			pending = mask
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("thread %d status has no SigBlk or SigPnd line", tid)
	}
	return blocked, pending, nil
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

// synHold drops the IPv4 TCP SYNs that leave an interface while it holds:
// a connect then waits in the kernel for TCP to send its SYN again. ARP
// and everything else pass.
type synHold struct{ dev string }

// newSYNHold puts a prio qdisc on dev, for the hold's filter, until the
// test ends.
func newSYNHold(t *testing.T, dev string) *synHold {
	t.Helper()
	if out, err := exec.Command("tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "prio").CombinedOutput(); err != nil {
		t.Fatalf("tc qdisc add dev %s root handle 1: prio: %v: %s", dev, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("tc", "qdisc", "del", "dev", dev, "root").CombinedOutput(); err != nil {
			t.Errorf("tc qdisc del dev %s root: %v: %s", dev, err, out)
		}
	})
	return &synHold{dev: dev}
}

// start drops SYNs until end.
func (h *synHold) start(t *testing.T) {
	t.Helper()
	// The TCP flags are byte 13 of the TCP header, after an IPv4 header
	// of 20 bytes (the lab's packets carry no IP options).
	args := []string{"filter", "add", "dev", h.dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
		"match", "ip", "protocol", "6", "0xff", "match", "u8", "0x02", "0x02", "at", "33", "action", "drop"}
	if out, err := exec.Command("tc", args...).CombinedOutput(); err != nil {
		t.Fatalf("tc %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// end lets SYNs pass again.
func (h *synHold) end() error {
	if out, err := exec.Command("tc", "filter", "del", "dev", h.dev, "parent", "1:").CombinedOutput(); err != nil {
		return fmt.Errorf("tc filter del dev %s parent 1: %v: %s", h.dev, err, out)
	}
	return nil
}
