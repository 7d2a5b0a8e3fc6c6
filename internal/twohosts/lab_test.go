package twohosts

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
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
	code := m.Run()
	closeSharedLab()
	os.Exit(code)
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

// labFor returns a lab booted as cfg says. Consecutive tests that ask for
// the same Config share one boot, since booting two emulated guests is most
// of a short test's time; asking for another Config powers the shared lab
// off first, so that no two labs share the machine's two cores. A test that
// fails, or that leaves a host unusable (spoilLab), retires the lab: the
// next test boots its own, and the failing test's log has both hosts' logs.
func labFor(t *testing.T, cfg hostlab.Config) *hostlab.Lab {
	t.Helper()
	key := labKey(cfg)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.lab != nil && shared.key != key {
		closeSharedLabLocked()
	}
	if shared.lab == nil {
		log := new(strings.Builder)
		cfg.Log = log
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		start := time.Now()
		l, err := hostlab.Boot(ctx, cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		t.Logf("lab booted in %v", time.Since(start).Round(time.Second))
		shared.lab, shared.key, shared.log = l, key, log
	} else {
		t.Log("lab shared with the test before")
	}
	l, log := shared.lab, shared.log
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("lab log:\n%s\n%s\n%s", log.String(), l.A.Logs(), l.B.Logs())
		spoilLab(l)
	})
	return l
}

// shared is the lab the last test used, kept for the next.
var shared struct {
	mu  sync.Mutex
	lab *hostlab.Lab     // guarded by mu; nil when none is booted
	key string           // guarded by mu; labKey of lab's Config
	log *strings.Builder // guarded by mu; lab's boot and driver log
}

// labKey names what a Config boots, so that equal Configs share a lab.
func labKey(cfg hostlab.Config) string {
	cfg.Log = nil
	return fmt.Sprintf("%+v", cfg)
}

// spoilLab retires l if it is the shared lab: a host was powered off, or a
// test failed on it, so the next test must not inherit its state.
func spoilLab(l *hostlab.Lab) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.lab == l {
		closeSharedLabLocked()
	}
}

func closeSharedLab() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	closeSharedLabLocked()
}

func closeSharedLabLocked() {
	if shared.lab != nil {
		shared.lab.Close()
		shared.lab, shared.key, shared.log = nil, "", nil
	}
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
	t.Cleanup(func() { stopRole(t, j) })
	return j
}

// stopRole kills j unless it has ended and waits until it has, so that the
// next test on a shared lab finds its ports and devices free. After a
// failure it does not wait: the lab is retired anyway, and a frozen host
// would not answer.
func stopRole(t *testing.T, j *hostlab.Job) {
	select {
	case <-j.Done():
		return
	default:
	}
	j.Signal(9)
	if t.Failed() {
		return
	}
	select {
	case <-j.Done():
	case <-time.After(time.Minute):
		t.Errorf("a role on the lab did not end within a minute of SIGKILL")
	}
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
