package twohosts

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/hostlab"
)

// roles are the programs this binary can be on a host, by
// RNET_TWOHOSTS_ROLE; each returns its exit code. Files register theirs in
// init.
var roles = map[string]func() int{}

func TestMain(m *testing.M) {
	if name := os.Getenv("RNET_TWOHOSTS_ROLE"); name != "" {
		role, ok := roles[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "twohosts: no role %q\n", name)
			os.Exit(2)
		}
		os.Exit(role())
	}
	os.Exit(m.Run())
}

// needLab skips unless the two-host tier was asked for: each boot costs two
// emulated guests.
func needLab(t *testing.T) {
	t.Helper()
	if os.Getenv("RNET_HOSTS") != "1" {
		t.Skip("boots two guests: runs in the two-host tier (make test-hosts, RNET_HOSTS=1)")
	}
	if os.Getenv("RNET_GUEST") == "1" {
		t.Skip("the two-host lab boots from the machine, not from a guest")
	}
}

// inGuest skips a guest test unless a host test started it on a host.
func inGuest(t *testing.T) {
	t.Helper()
	if os.Getenv("RNET_TWOHOSTS_GUEST") != "1" {
		t.Skip("runs on a host of the two-host lab, started by a two-host test")
	}
}

// bootLab boots the lab for one test and powers it off when the test ends,
// with both hosts' logs in the test's output if it failed.
func bootLab(t *testing.T, cfg hostlab.Config) *hostlab.Lab {
	t.Helper()
	var log strings.Builder
	cfg.Log = &log
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	l, err := hostlab.Boot(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("lab log:\n%s\n%s\n%s", log.String(), l.A.Logs(), l.B.Logs())
		}
		l.Close()
	})
	return l
}

// binary is this test binary's path, which the hosts see at the same path.
func binary(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startRole starts this binary on h as role, with env added, and kills it
// when the test ends. Its lines go to the test's log when -v.
func startRole(t *testing.T, h *hostlab.Host, role string, env ...string) *hostlab.Job {
	t.Helper()
	env = append([]string{"RNET_TWOHOSTS_ROLE=" + role}, env...)
	j, err := h.Start(env, logLines(t, h.Name+"/"+role), binary(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-j.Done():
		default:
			j.Signal(9)
		}
	})
	return j
}

// runGuestTest runs the guest test name on h to its end and fails t if it
// fails.
func runGuestTest(t *testing.T, ctx context.Context, h *hostlab.Host, name string, env ...string) {
	t.Helper()
	env = append([]string{"RNET_TWOHOSTS_GUEST=1"}, env...)
	j, err := h.Start(env, logLines(t, h.Name+"/"+name), binary(t), "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatalf("%s on host %s: %v", name, h.Name, err)
	}
	if !strings.Contains(j.Output(), "--- PASS: "+name) {
		t.Fatalf("%s on host %s did not pass (skipped?):\n%s", name, h.Name, j.Output())
	}
}

// logLines logs a job's lines under prefix when the test runs with -v.
func logLines(t *testing.T, prefix string) func(string) {
	if !testing.Verbose() {
		return nil
	}
	return func(line string) { fmt.Fprintf(os.Stderr, "%s: %s\n", prefix, line) }
}
