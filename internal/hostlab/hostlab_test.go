package hostlab

import (
	"context"
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
