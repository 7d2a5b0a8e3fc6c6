//go:build linux && cgo

package faults

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/rnet"
)

// TestFaultDialSilentHost: a dial to an address on the lab's wire where no
// host answers fails once Config.HandshakeTimeout has run out, with a
// *rnet.NoAnswerError that names the step and says the host does not
// answer. With a neighbour entry for the address (as a host that just
// went down leaves behind), the connection request goes unanswered; with
// none, the address resolution does (no ARP reply).
func TestFaultDialSilentHost(t *testing.T) {
	pair := needLab(t)
	// Warm up: librdmacm opens its devices once per process.
	{
		ln := listen(t, pair, nil)
		a, b := connect(t, pair, ln, nil)
		a.Close()
		b.Close()
		ln.Close()
	}
	for _, tc := range []struct {
		name  string
		addr  string
		neigh bool          // give the address a neighbour entry no NIC answers to
		bound time.Duration // Config.HandshakeTimeout; 0 for the default, 10 s
		step  string
	}{
		{"ConnectionRequest", "10.77.0.98:7471", true, 0, "connection request"},
		{"AddressResolution", "10.77.0.99:7471", false, 3 * time.Second, "address resolution"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, _, _ := net.SplitHostPort(tc.addr)
			exec.Command("ip", "neigh", "del", host, "dev", "rvm0").Run() // a previous run's
			if tc.neigh {
				run(t, "ip", "neigh", "replace", host, "lladdr", "02:00:00:00:00:98", "dev", "rvm0", "nud", "permanent")
			}
			t.Cleanup(func() { exec.Command("ip", "neigh", "del", host, "dev", "rvm0").Run() })
			bound := tc.bound
			if bound == 0 {
				bound = 10 * time.Second
			}
			before := takeSnapshot(t)
			start := time.Now()
			c, err := dialer(pair, &rnet.Config{HandshakeTimeout: tc.bound}).Dial("rdma", tc.addr)
			took := time.Since(start)
			if err == nil {
				c.Close()
				t.Fatalf("dial %s succeeded", tc.addr)
			}
			t.Logf("%v after %v", err, took.Round(time.Millisecond))
			// The local work of a dial (a queue pair, its rings) is not
			// bounded; in the emulated guest it takes well under a second.
			if limit := bound + 5*time.Second; took > limit {
				t.Errorf("the dial took %v to fail; the bound is %v", took, bound)
			}
			var na *rnet.NoAnswerError
			var ne net.Error
			if !errors.As(err, &na) || na.Step != tc.step || !strings.Contains(err.Error(), tc.addr) ||
				!strings.Contains(err.Error(), "no reply to the "+tc.step) || !strings.HasSuffix(err.Error(), "the host does not answer") {
				t.Errorf("got %v, want a *rnet.NoAnswerError for the %s, saying the host does not answer", err, tc.step)
			}
			if !errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
				!errors.As(err, &ne) || !ne.Timeout() {
				t.Errorf("got %v: want it to match ETIMEDOUT and be a timeout, but not a deadline of the caller's", err)
			}
			checkNoLeaks(t, before, "a dial to a silent host")
		})
	}
}
