package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"time"

	"github.com/rnet-dev/rnet/rnet"
)

// holdings is what the scale server holds that its connections add to:
// fds, goroutines and (over RDMA) the device objects its threads made.
type holdings struct {
	FDs, Goroutines int
	QPs, CQs, MRs   int
}

func (h holdings) String() string {
	return fmt.Sprintf("fds=%d goroutines=%d qps=%d cqs=%d mrs=%d", h.FDs, h.Goroutines, h.QPs, h.CQs, h.MRs)
}

// releasedFrom reports whether h holds no more than base: everything the
// connections and the listener made is gone.
func (h holdings) releasedFrom(base holdings) bool {
	return h.FDs <= base.FDs && h.Goroutines <= base.Goroutines &&
		h.QPs <= base.QPs && h.CQs <= base.CQs && h.MRs <= base.MRs
}

// warmUpRDMA listens on addr's host (on device, if not ""), any port, and
// closes the listener again, which leaves librdmacm's per-device contexts
// open.
func warmUpRDMA(addr, device string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	lc := rnet.ListenConfig{Device: device}
	ln, err := lc.Listen(context.Background(), "rdma", net.JoinHostPort(host, "0"))
	if err != nil {
		return explain(err, addr)
	}
	return ln.Close()
}

func takeHoldings(tcp bool) (holdings, error) {
	var h holdings
	var err error
	if h.FDs, err = openFDs(); err != nil {
		return h, fmt.Errorf("counting open fds: %w", err)
	}
	h.Goroutines = runtime.NumGoroutine()
	if tcp {
		return h, nil
	}
	for _, k := range []struct {
		kind string
		n    *int
	}{{"qp", &h.QPs}, {"cq", &h.CQs}, {"mr", &h.MRs}} {
		if *k.n, _, err = rdmaResources(k.kind); err != nil {
			return h, err
		}
	}
	return h, nil
}

// releaseWait bounds how long the server waits, after closing every
// connection, for what they held to be gone: Close releases a connection's
// objects before it returns, so this covers only goroutines on their way out.
const releaseWait = time.Minute

// checkReleased prints, once every connection is closed, what the server
// holds against what it held before it listened, as a SCALE-RELEASE line,
// and fails if anything is left over.
func checkReleased(base holdings, tcp bool, out io.Writer) error {
	deadline := time.Now().Add(releaseWait)
	for {
		now, err := takeHoldings(tcp)
		if err != nil {
			return err
		}
		ok := now.releasedFrom(base)
		if ok || time.Now().After(deadline) {
			fmt.Fprintf(out, "SCALE-RELEASE released=%v %s (before listening: %s)\n", ok, now, base)
			if !ok {
				return fmt.Errorf("after closing every connection the server still holds %s, against %s before it listened", now, base)
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond) // between readings of a real condition
	}
}
