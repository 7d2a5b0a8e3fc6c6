package twohosts

import (
	"bytes"
	"context"
	byteorder "encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/hostlab"
	"github.com/rnet-dev/rnet/rnet"
)

// The across tests run one end of each connection on host A and the other
// on host B: a server role on B, announced on one line, and a guest test on
// A that reaches it at the addresses the host test passes in
// acrossTargetsEnv.
const (
	// acrossListening starts the line on which a server role prints its
	// listeners' addresses.
	acrossListening = "across: listening on"
	// acrossTargetsEnv is the comma-separated addresses a guest test on A
	// connects to.
	acrossTargetsEnv = "RNET_ACROSS_TARGETS"
)

// acrossListen listens over RDMA on this host's IPv4 and IPv6 addresses of
// wire 0, on ports the kernel picks, and prints them for startServerRole.
func acrossListen() ([]*rnet.Listener, error) {
	var lns []*rnet.Listener
	var addrs []string
	for _, env := range []string{"RNET_HOST_ADDR0", "RNET_HOST_ADDR6_0"} {
		a, err := netip.ParseAddr(os.Getenv(env))
		if err != nil {
			closeAll(lns)
			return nil, fmt.Errorf("%s: %w", env, err)
		}
		ln, err := rnet.Listen("rdma", netip.AddrPortFrom(a, 0).String())
		if err != nil {
			closeAll(lns)
			return nil, err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	fmt.Println(acrossListening, strings.Join(addrs, " "))
	return lns, nil
}

func closeAll(lns []*rnet.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}

// terminated returns a channel closed when the role is asked to end
// (stopServerRole sends SIGTERM); a role calls it first, so that the signal
// cannot come before it is caught.
func terminated() <-chan struct{} {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		<-ch
		close(done)
	}()
	return done
}

// startServerRole starts role on h and returns the addresses it listens on,
// IPv4 first.
func startServerRole(t *testing.T, ctx context.Context, h *hostlab.Host, role string, env ...string) (*hostlab.Job, []netip.AddrPort) {
	t.Helper()
	j := startRole(t, h, role, env...)
	line, err := j.WaitFor(ctx, acrossListening)
	if err != nil {
		t.Fatalf("%s on host %s: %v", role, h.Name, err)
	}
	var addrs []netip.AddrPort
	for _, f := range strings.Fields(line[strings.Index(line, acrossListening)+len(acrossListening):]) {
		ap, err := netip.ParseAddrPort(f)
		if err != nil {
			t.Fatalf("%s on host %s announced %q: %v", role, h.Name, line, err)
		}
		addrs = append(addrs, ap)
	}
	if len(addrs) == 0 {
		t.Fatalf("%s on host %s announced no address: %q", role, h.Name, line)
	}
	return j, addrs
}

// stopServerRole asks a server role to end and fails t unless it exits 0
// (the race detector makes a role that raced exit 66).
func stopServerRole(t *testing.T, ctx context.Context, j *hostlab.Job, role string) {
	t.Helper()
	select {
	case <-j.Done():
	default:
		if err := j.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("%s: %v", role, err)
		}
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatalf("%s: %v", role, err)
	}
}

// targetsEnv is acrossTargetsEnv set to addrs.
func targetsEnv(addrs []netip.AddrPort) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return acrossTargetsEnv + "=" + strings.Join(s, ",")
}

// acrossTargets returns the addresses a guest test was given.
func acrossTargets(t *testing.T) []netip.AddrPort {
	t.Helper()
	var addrs []netip.AddrPort
	for _, f := range strings.Split(os.Getenv(acrossTargetsEnv), ",") {
		ap, err := netip.ParseAddrPort(f)
		if err != nil {
			t.Fatalf("%s: %v", acrossTargetsEnv, err)
		}
		addrs = append(addrs, ap)
	}
	return addrs
}

func family(a netip.AddrPort) string {
	if a.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// hostAddr is this host's wire-0 address of the family of peer.
func hostAddr(t *testing.T, peer netip.AddrPort) netip.Addr {
	t.Helper()
	env := "RNET_HOST_ADDR0"
	if peer.Addr().Is6() {
		env = "RNET_HOST_ADDR6_0"
	}
	a, err := netip.ParseAddr(os.Getenv(env))
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	return a
}

// dialerFrom dials from local, so that the connection leaves by the wire.
func dialerFrom(local netip.Addr) *rnet.Dialer {
	return &rnet.Dialer{LocalAddr: &rnet.Addr{AddrPort: netip.AddrPortFrom(local, 0)}, Timeout: 30 * time.Second}
}

// runAcrossGuest runs the guest test name on h to its end and fails t,
// naming every failed case, unless it passed.
func runAcrossGuest(t *testing.T, ctx context.Context, h *hostlab.Host, name string, env ...string) {
	t.Helper()
	env = append([]string{"RNET_TWOHOSTS_GUEST=1"}, env...)
	j, err := h.Start(env, logLines(t, h.Name+"/"+name), binary(t), "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	if err != nil {
		t.Fatal(err)
	}
	err = j.Wait(ctx)
	out := j.Output()
	var failed []string
	for _, line := range strings.Split(out, "\n") {
		if c, ok := strings.CutPrefix(strings.TrimSpace(line), "--- FAIL: "); ok {
			failed = append(failed, c)
		}
	}
	if err != nil || len(failed) > 0 || !strings.Contains(out, "--- PASS: "+name) {
		t.Fatalf("%s on host %s did not pass (failed: %s; %v); its output:\n%s", name, h.Name, strings.Join(failed, ", "), err, out)
	}
}

// pattern is the n bytes that seed names, the same on both hosts, so that
// each side checks what the other sent without it crossing twice.
func pattern(seed uint64, n int) []byte {
	var key [32]byte
	byteorder.LittleEndian.PutUint64(key[:], seed)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

// checkPattern reports how got differs from pattern(seed, n).
func checkPattern(what string, seed uint64, got []byte, n int) error {
	if len(got) != n {
		return fmt.Errorf("%s: %d bytes, want %d", what, len(got), n)
	}
	want := pattern(seed, n)
	if bytes.Equal(got, want) {
		return nil
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("%s: byte %d of %d is %#x, want %#x", what, i, n, got[i], want[i])
		}
	}
	return nil
}
