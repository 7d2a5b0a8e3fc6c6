package hostlab

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// needLab skips unless the two-host tier was asked for (make test-hosts sets
// RNET_HOSTS=1): each boot costs two emulated guests.
func needLab(t *testing.T) {
	t.Helper()
	if os.Getenv("RNET_HOSTS") != "1" {
		t.Skip("boots two guests: runs in the two-host tier (make test-hosts, RNET_HOSTS=1)")
	}
	if os.Getenv("RNET_GUEST") == "1" {
		t.Skip("the two-host lab boots from the host, not from a guest")
	}
}

func bootLab(t *testing.T, cfg Config) *Lab {
	t.Helper()
	var log strings.Builder
	cfg.Log = &log
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l, err := Boot(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestHostsSeeEachOther boots both hosts and checks each one's devices,
// addresses and environment, and that a TCP connect crosses the relay (and is refused:
// nothing listens).
func TestHostsSeeEachOther(t *testing.T) {
	needLab(t)
	l := bootLab(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, h := range []*Host{l.A, l.B} {
		out, err := h.Run(ctx, []string{"X=it's"}, "bash", "-c", `echo "$X $RNET_HOST $RNET_HOST_ADDR0 $RNET_PEER_ADDR0 $RNET_HOST_DEVICE0"; rdma link show; timeout 20 bash -c "exec 3<>/dev/tcp/$RNET_PEER_ADDR0/9" 2>&1 || true`)
		if err != nil {
			t.Fatal(err)
		}
		want := "it's " + h.Name + " " + h.Addr(0).String() + " " + h.peer().Addr(0).String() + " rxe0"
		if !strings.Contains(out, want) || !strings.Contains(out, "rxe0/1 state ACTIVE") || !strings.Contains(out, "Connection refused") {
			t.Fatalf("host %s printed\n%s\nwant %q, rxe0 ACTIVE and a connect refused", h.Name, out, want)
		}
	}
	if fwd, _ := l.Wire(0).Counts(); fwd == 0 {
		t.Fatal("the relay forwarded nothing: the ping did not cross the wire")
	}
}

// probe tries a TCP connect from h to its peer's port 9 (nothing listens) and
// reports whether an answer (a refusal) came within limit.
func probe(t *testing.T, h *Host, limit string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := h.Run(ctx, nil, "bash", "-c", `timeout `+limit+` bash -c "exec 3<>/dev/tcp/$RNET_PEER_ADDR0/9" 2>&1; echo "rc=$?"`)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.Contains(out, "Connection refused"):
		return true
	case strings.Contains(out, "rc=124"):
		return false
	}
	t.Fatalf("host %s's probe printed %q", h.Name, out)
	return false
}

// TestFaults does each fault to a running lab and checks what the hosts see:
// a cut wire and a frozen host answer nothing, a restored wire and a thawed
// host answer again, a downed link shows in the guest's carrier, a powered-off
// host's jobs end with ErrPoweredOff, and a rebooted host runs jobs again.
func TestFaults(t *testing.T) {
	needLab(t)
	l := bootLab(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if !probe(t, l.A, "20") {
		t.Fatal("no answer from B over an intact wire")
	}

	must(t, l.Wire(0).Cut())
	if probe(t, l.A, "3") {
		t.Fatal("B answered across a cut wire")
	}
	must(t, l.Wire(0).Restore())
	if !probe(t, l.A, "20") {
		t.Fatal("no answer from B after the wire was restored")
	}

	must(t, l.B.Freeze())
	if probe(t, l.A, "3") {
		t.Fatal("a frozen B answered")
	}
	if err := l.B.LinkDown(0); err == nil {
		t.Fatal("LinkDown on a frozen host did not fail")
	}
	must(t, l.B.Thaw())
	if !probe(t, l.A, "20") {
		t.Fatal("no answer from B after the thaw")
	}

	// The guest learns of the carrier through its link watch, a while after
	// set_link returns: wait for the port's state there, within a bound.
	portState := func(state string) {
		t.Helper()
		out, err := l.A.Run(ctx, nil, "bash", "-c", `for i in $(seq 200); do rdma link show rxe0/1 | grep -q "state `+state+`" && exit 0; sleep 0.1; done; rdma link show rxe0/1; exit 1`)
		if err != nil {
			t.Fatalf("host a's rxe0 port did not become %s within 20 s: %v\n%s", state, err, out)
		}
	}
	must(t, l.A.LinkDown(0))
	portState("DOWN")
	must(t, l.A.LinkUp(0))
	portState("ACTIVE")
	if !probe(t, l.A, "20") {
		t.Fatal("no answer from B after LinkUp")
	}

	job, err := l.B.Start(nil, nil, "sleep", "600")
	if err != nil {
		t.Fatal(err)
	}
	l.B.PowerOff()
	if err := job.Wait(ctx); !errors.Is(err, ErrPoweredOff) {
		t.Fatalf("a powered-off host's job ended with %v, want ErrPoweredOff", err)
	}
	if _, err := l.B.Start(nil, nil, "true"); err == nil {
		t.Fatal("a powered-off host started a job")
	}
	if err := l.B.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	if !probe(t, l.A, "20") {
		t.Fatal("no answer from B after its reboot")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
