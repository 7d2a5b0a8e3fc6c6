package twohosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/hostlab"
	"github.com/rnet-dev/rnet/rnet"
)

// rstreamRun is one rstream invocation in verify mode: one connection that,
// after a 16-byte sync each way, for iters iterations carries count
// transfers of size bytes from client to server and count back.
type rstreamRun struct {
	ipv6               bool
	size, count, iters int
}

// rstreamRuns cover a latency pass, bandwidth passes whose transfers fill
// and wrap both sides' rings (100000 is no power of two and larger than
// half a ring), and one run over IPv6.
var rstreamRuns = []rstreamRun{
	{false, 64, 1, 300},
	{false, 4 << 10, 100, 2},
	{false, 100000, 20, 2},
	{false, 1 << 20, 8, 1},
	{true, 64 << 10, 20, 2},
}

func (r rstreamRun) String() string {
	fam := "IPv4"
	if r.ipv6 {
		fam = "IPv6"
	}
	return fmt.Sprintf("%s-%dx%dx%d", fam, r.size, r.count, r.iters)
}

func (r rstreamRun) args() []string {
	return []string{"-f", "ip", "-T", "v", "-S", strconv.Itoa(r.size), "-C", strconv.Itoa(r.count), "-I", strconv.Itoa(r.iters)}
}

// encodeRuns and decodeRuns pass runs to the other host's side.
func encodeRuns(runs []rstreamRun) string {
	var s []string
	for _, r := range runs {
		s = append(s, r.String())
	}
	return strings.Join(s, ",")
}

func decodeRuns(s string) ([]rstreamRun, error) {
	var runs []rstreamRun
	for _, f := range strings.Split(s, ",") {
		var r rstreamRun
		var fam string
		if _, err := fmt.Sscanf(strings.Replace(f, "-", " ", 1), "%s %dx%dx%d", &fam, &r.size, &r.count, &r.iters); err != nil {
			return nil, fmt.Errorf("rstream run %q: %w", f, err)
		}
		r.ipv6 = fam == "IPv6"
		runs = append(runs, r)
	}
	return runs, nil
}

const rstreamRunsEnv = "RNET_ACROSS_RSTREAM_RUNS"

// rstreamHeader ends the header rstream prints once it listens.
const rstreamHeader = "usec/xfer"

// rstreamBasePort is the first port the C servers listen on, one per run.
const rstreamBasePort = 7600

func init() { roles["across-rstream-server"] = rstreamServerRole }

// TestRstreamInteropBetweenHosts: librdmacm's C rstream and rnet on two
// hosts, each as server and as client, every byte verified by both sides.
func TestRstreamInteropBetweenHosts(t *testing.T) {
	needLab(t)
	l := labFor(t, hostlab.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	t.Run("rstream-server-on-B/rnet-client-on-A", func(t *testing.T) {
		var servers []*hostlab.Job
		var targets []string
		for i, r := range rstreamRuns {
			addr := l.B.Addr(0)
			if r.ipv6 {
				addr = l.B.Addr6(0)
			}
			port := rstreamBasePort + i
			name := "rstream-server-" + r.String()
			// Line-buffered, so that its header, which it prints once it
			// listens, says when to dial.
			argv := append([]string{"stdbuf", "-oL", "rstream", "-b", addr.String(), "-p", strconv.Itoa(port)}, r.args()...)
			j, err := l.B.Start(nil, logLines(t, "b/"+name), argv...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stopRole(t, j) })
			if _, err := j.WaitFor(ctx, rstreamHeader); err != nil {
				t.Fatal(err)
			}
			servers = append(servers, j)
			targets = append(targets, netip.AddrPortFrom(addr, uint16(port)).String())
		}
		runAcrossGuest(t, ctx, l.A, "TestAcrossGuestRstreamClient", rstreamRunsEnv+"="+encodeRuns(rstreamRuns), acrossTargetsEnv+"="+strings.Join(targets, ","))
		for i, j := range servers {
			if err := j.Wait(ctx); err != nil {
				t.Fatalf("rstream server for %v: %v", rstreamRuns[i], err)
			}
			if err := checkRstreamOutput(j.Output()); err != nil {
				t.Errorf("rstream server for %v: %v; output:\n%s", rstreamRuns[i], err, j.Output())
			}
		}
	})
	t.Run("rnet-server-on-B/rstream-client-on-A", func(t *testing.T) {
		server, addrs := startServerRole(t, ctx, l.B, "across-rstream-server", rstreamRunsEnv+"="+encodeRuns(rstreamRuns))
		for _, r := range rstreamRuns {
			to, from := addrs[0], l.A.Addr(0)
			if r.ipv6 {
				to, from = addrs[1], l.A.Addr6(0)
			}
			argv := append([]string{"rstream", "-s", to.Addr().String(), "-b", from.String(), "-p", strconv.Itoa(int(to.Port()))}, r.args()...)
			out, err := l.A.Run(ctx, nil, argv...)
			if err == nil {
				err = checkRstreamOutput(out)
			}
			if err != nil {
				t.Fatalf("rstream client, %v: %v; output:\n%s\nrnet server's output:\n%s", r, err, out, server.Output())
			}
			t.Logf("rstream client, %v:\n%s", r, out)
		}
		if err := server.Wait(ctx); err != nil {
			t.Fatalf("rnet server: %v", err)
		}
	})
}

// checkRstreamOutput fails on any error rstream printed (its exit code
// ignores a failed test) and unless it printed its result line.
func checkRstreamOutput(out string) error {
	for _, bad := range []string{"verification failed", "rsend", "rrecv", "rpoll", "raccept", "rconnect", "rlisten", "rbind", "getaddrinfo"} {
		if strings.Contains(out, bad) {
			return fmt.Errorf("rstream reported %q", bad)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 8 && f[0] == "custom" {
			return nil
		}
	}
	return errors.New("rstream printed no result line")
}

// TestAcrossGuestRstreamClient is rstream's client side on host A, against
// the C servers at acrossTargetsEnv, one per run.
func TestAcrossGuestRstreamClient(t *testing.T) {
	inGuest(t)
	runs, err := decodeRuns(os.Getenv(rstreamRunsEnv))
	if err != nil {
		t.Fatal(err)
	}
	targets := acrossTargets(t)
	if len(targets) != len(runs) {
		t.Fatalf("%d targets for %d runs", len(targets), len(runs))
	}
	for i, r := range runs {
		t.Run(r.String(), func(t *testing.T) {
			c, err := dialerFrom(hostAddr(t, targets[i])).Dial("rdma", targets[i].String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Minute))
			if err := (&rstreamSide{c: c}).exchange(r, true); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// rstreamServerRole is rstream's server side for each run of
// rstreamRunsEnv in turn, one connection each; it exits 0 once all passed.
func rstreamServerRole() int {
	runs, err := decodeRuns(os.Getenv(rstreamRunsEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "across-rstream-server:", err)
		return 2
	}
	lns, err := acrossListen()
	if err != nil {
		fmt.Fprintln(os.Stderr, "across-rstream-server:", err)
		return 1
	}
	defer closeAll(lns)
	for _, r := range runs {
		ln := lns[0]
		if r.ipv6 {
			ln = lns[1]
		}
		if err := serveRstreamRun(ln, r); err != nil {
			fmt.Fprintf(os.Stderr, "across-rstream-server: %v: %v\n", r, err)
			return 1
		}
		fmt.Printf("across-rstream-server: %v passed\n", r)
	}
	return 0
}

func serveRstreamRun(ln *rnet.Listener, r rstreamRun) error {
	ln.SetDeadline(time.Now().Add(2 * time.Minute))
	c, err := ln.AcceptRDMA()
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	if err := (&rstreamSide{c: c}).exchange(r, false); err != nil {
		return err
	}
	// rstream ends its connection with shutdown(SHUT_RDWR) and close.
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		return fmt.Errorf("after the last transfer: Read = %d, %v; want 0, EOF", n, err)
	}
	return c.Close()
}

// rstreamBytes holds rstream's verify pattern: the n-th byte a process
// sends, its sync included, is byte(n), and so must be the n-th it
// receives. One connection per process, so the counts are the
// connection's.
var rstreamBytes = func() []byte {
	b := make([]byte, 256+64<<10)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

// rstreamSide is one side of an rstream connection.
type rstreamSide struct {
	c           net.Conn
	sent, recvd uint64
	buf         [64 << 10]byte
}

func (s *rstreamSide) send(n int) error {
	for n > 0 {
		k := min(n, 64<<10)
		off := s.sent % 256
		if _, err := s.c.Write(rstreamBytes[off : off+uint64(k)]); err != nil {
			return err
		}
		s.sent += uint64(k)
		n -= k
	}
	return nil
}

func (s *rstreamSide) recv(n int) error {
	for n > 0 {
		b := s.buf[:min(n, len(s.buf))]
		if _, err := io.ReadFull(s.c, b); err != nil {
			return err
		}
		for i, v := range b {
			if v != byte(s.recvd+uint64(i)) {
				return fmt.Errorf("stream byte %d is %#x, want %#x", s.recvd+uint64(i), v, byte(s.recvd+uint64(i)))
			}
		}
		s.recvd += uint64(len(b))
		n -= len(b)
	}
	return nil
}

// exchange runs r as rstream's client or server does.
func (s *rstreamSide) exchange(r rstreamRun, client bool) error {
	out, in := s.send, s.recv
	if !client {
		out, in = s.recv, s.send
	}
	if err := out(16); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := in(16); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	for i := range r.iters {
		for range r.count {
			if err := out(r.size); err != nil {
				return fmt.Errorf("iteration %d: %w", i, err)
			}
		}
		for range r.count {
			if err := in(r.size); err != nil {
				return fmt.Errorf("iteration %d: %w", i, err)
			}
		}
	}
	return nil
}
