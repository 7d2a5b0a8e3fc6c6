//go:build linux && cgo

package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/stats"
	"github.com/rnet-dev/rnet/rnet"
)

// BenchmarkLossyHTTP measures HTTP's latency tail on a lossy wire: 3,000
// POSTs, 32 at a time over 32 kept-alive connections (dialled and used
// once before the clock starts), each echoing its body, with netem
// dropping packets on rvm0 (RNET_LOSS, default 0.1%: the client's data and
// its acknowledgements of the server's). It runs rnet with the connection
// manager's ACK timeout ("cm-timeouts", what rnet did before it set its
// own), rnet with its defaults ("rnet") and TCP between the same addresses
// ("tcp"), RNET_LOSSY_ROUNDS times (default 1), interleaved in an order
// rotated from round to round. Each run reports p50, p99 and max in
// milliseconds, the failed requests (errors) and the connections dialled
// while measured; the log adds the packets netem dropped and Soft-RoCE's
// retransmission counters, and at the end each kind's figures over all
// rounds with its p99's ratio to TCP's. Connections stalled in a long
// timeout leave the others less contention, so compare medians along with
// the requests per second. It measures and asserts nothing; one op is a
// whole run, so give it -benchtime 1x:
//
//	RNET_LOSSY_ROUNDS=3 flock /tmp/rnet-guest.lock go test -run '^$' -bench LossyHTTP \
//	    -benchtime 1x -v -exec "$PWD/scripts/softroce-vm" ./faults
//
// RNET_LOSSY_ACK_TIMEOUTS adds rnet runs with other ACK timeouts (a
// comma-separated list of durations, e.g. 67ms,134ms); RNET_LOSSY_SIZES
// replaces the body sizes (bytes, comma-separated); RNET_LOSSY_FRESH=1
// dials a connection per request, which puts the connection manager's
// handshake on the wire and in every latency.
func BenchmarkLossyHTTP(b *testing.B) {
	pair := needLab(b)
	loss := os.Getenv("RNET_LOSS")
	if loss == "" {
		loss = "0.1%"
	}
	rounds := 1
	if v := os.Getenv("RNET_LOSSY_ROUNDS"); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			b.Fatalf("RNET_LOSSY_ROUNDS=%q: want a positive count", v)
		}
	}
	fresh := os.Getenv("RNET_LOSSY_FRESH") == "1"
	if v := os.Getenv("RNET_LOSSY_SIZES"); v != "" {
		lossySizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 || n >= len(pool) {
				b.Fatalf("RNET_LOSSY_SIZES=%q: want byte counts below %d", v, len(pool))
			}
			lossySizes = append(lossySizes, n)
		}
	}
	local := netip.AddrPortFrom(pair.Client, 0)
	rdma := func(cfg *rnet.Config) func() (net.Listener, dialFunc) {
		return func() (net.Listener, dialFunc) { return lossyRDMA(b, pair.Server, local, cfg) }
	}
	kinds := []lossyKind{
		{name: "cm-timeouts", setup: rdma(&rnet.Config{AckTimeout: -1})},
		{name: "rnet", setup: rdma(nil)},
		{name: "tcp", setup: func() (net.Listener, dialFunc) { return lossyTCP(b, pair.Server, local) }},
	}
	for _, v := range strings.Split(os.Getenv("RNET_LOSSY_ACK_TIMEOUTS"), ",") {
		if v == "" {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("RNET_LOSSY_ACK_TIMEOUTS: %v", err)
		}
		kinds = append(kinds, lossyKind{name: "ack-" + v, setup: rdma(&rnet.Config{AckTimeout: d})})
	}
	netem(b, "loss", loss)
	for round := range rounds {
		// Going first, or right after another, has moved guest figures by
		// several percent.
		for i := range kinds {
			k := &kinds[(round+i)%len(kinds)]
			b.Run(k.name, func(b *testing.B) {
				ln, dial := k.setup()
				defer ln.Close()
				dropped, counters := netemDropped(b), readRXECounters()
				var res lossyResult
				for range b.N {
					res.add(runLossyHTTP(ln, dial, fresh))
				}
				res.dropped = netemDropped(b) - dropped
				res.rxe = readRXECounters().sub(counters)
				res.report(b, loss, fresh)
				k.total.add(res)
			})
		}
	}
	var tcpP99 time.Duration
	for _, k := range kinds {
		if k.name == "tcp" {
			slices.Sort(k.total.latencies)
			tcpP99 = stats.Percentile(k.total.latencies, 99)
		}
	}
	b.Logf("over %d rounds, netem loss %s, fresh connections %v:", rounds, loss, fresh)
	for _, k := range kinds {
		r := &k.total
		slices.Sort(r.latencies)
		p99 := stats.Percentile(r.latencies, 99)
		n := len(r.latencies) + len(r.errors)
		b.Logf("  %-12s %5d requests, %d failed, %4.0f/s, %4d packets dropped, %5d retransmissions: p50 %7.1f ms, p99 %7.1f ms (%.2f× TCP's), p99.9 %7.1f ms, max %7.1f ms",
			k.name, n, len(r.errors), float64(n)/r.wall.Seconds(), r.dropped, r.rxe.retries, ms(stats.Percentile(r.latencies, 50)),
			ms(p99), float64(p99)/float64(tcpP99), ms(stats.Percentile(r.latencies, 99.9)), ms(r.max()))
	}
}

const (
	lossyRequests    = 3000
	lossyConcurrency = 32
)

// lossySizes are the request (and response) body sizes, cycled: one
// packet, 16 and 64 at the lab's RoCE MTU of 1024, so that at 0.1% about
// one request in thirty meets a loss (RNET_LOSSY_SIZES overrides them).
var lossySizes = []int{1 << 10, 16 << 10, 64 << 10}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

type lossyKind struct {
	name  string
	setup func() (net.Listener, dialFunc)
	total lossyResult // over all rounds
}

func lossyRDMA(b *testing.B, server netip.Addr, local netip.AddrPort, cfg *rnet.Config) (net.Listener, dialFunc) {
	ln, err := (&rnet.ListenConfig{Config: cfg}).Listen(context.Background(), "rdma", net.JoinHostPort(server.String(), "0"))
	if err != nil {
		b.Fatal(err)
	}
	d := &rnet.Dialer{Config: cfg, LocalAddr: &rnet.Addr{AddrPort: local}, Timeout: 2 * time.Minute}
	return ln, func(ctx context.Context, _, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, "rdma", addr)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return c, nil
	}
}

func lossyTCP(b *testing.B, server netip.Addr, local netip.AddrPort) (net.Listener, dialFunc) {
	ln, err := net.Listen("tcp", net.JoinHostPort(server.String(), "0"))
	if err != nil {
		b.Fatal(err)
	}
	d := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(local), Timeout: 2 * time.Minute}
	return ln, d.DialContext
}

// lossyResult is what the runs of one kind measured.
type lossyResult struct {
	latencies []time.Duration
	errors    []error
	dials     int64 // while measured
	dropped   int   // by netem
	rxe       rxeCounters
	wall      time.Duration
}

func (r *lossyResult) add(o lossyResult) {
	r.latencies = append(r.latencies, o.latencies...)
	r.errors = append(r.errors, o.errors...)
	r.dials += o.dials
	r.dropped += o.dropped
	r.rxe = r.rxe.add(o.rxe)
	r.wall += o.wall
}

// max is the slowest latency; latencies must be sorted.
func (r *lossyResult) max() time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[len(r.latencies)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r *lossyResult) report(b *testing.B, loss string, fresh bool) {
	slices.Sort(r.latencies)
	p50, p99 := stats.Percentile(r.latencies, 50), stats.Percentile(r.latencies, 99)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	b.ReportMetric(ms(r.max()), "max-ms")
	b.ReportMetric(float64(len(r.errors)), "errors")
	b.ReportMetric(float64(r.dials), "dials")
	b.ReportMetric(0, "ns/op") // one op is a whole run: its time says nothing
	b.Logf("netem loss %s, fresh connections %v: %d requests in %v, %d failed, %d dials, %d packets dropped; p50 %v p90 %v p99 %v p99.9 %v max %v",
		loss, fresh, len(r.latencies)+len(r.errors), r.wall.Round(time.Millisecond), len(r.errors), r.dials, r.dropped,
		p50.Round(time.Microsecond), stats.Percentile(r.latencies, 90).Round(time.Microsecond),
		p99.Round(time.Microsecond), stats.Percentile(r.latencies, 99.9).Round(time.Microsecond), r.max().Round(time.Microsecond))
	if r.rxe != (rxeCounters{}) {
		b.Logf("rxe0+rxe1: %d packets sent, %d retransmissions started (%d on a NAK), %d duplicate requests received; %d packets dropped by a full input backlog",
			r.rxe.sent, r.rxe.retries, r.rxe.nakRetries, r.rxe.duplicates, r.rxe.backlog)
	}
	for i, err := range r.errors {
		if i == 5 {
			b.Logf("... and %d more", len(r.errors)-i)
			break
		}
		b.Logf("failed: %v", err)
	}
}

// runLossyHTTP serves an echo handler on ln and sends lossyRequests POSTs
// to it, lossyConcurrency at a time, through connections from dial, which
// unless fresh it dials and uses once before the clock starts. Each
// request's latency runs from the call to the last byte of its checked
// response; a request that fails or comes back wrong is an error.
func runLossyHTTP(ln net.Listener, dial dialFunc, fresh bool) lossyResult {
	// The warm-up requests wait for each other in the handler, so that
	// each has a connection of its own.
	var arrived atomic.Int32
	allArrived := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/warm-up" {
			if arrived.Add(1) == lossyConcurrency {
				close(allArrived)
			}
			select {
			case <-allArrived:
			case <-r.Context().Done():
			}
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	var dials atomic.Int64
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dial(ctx, network, addr)
		},
		MaxIdleConnsPerHost: lossyConcurrency,
		DisableKeepAlives:   fresh,
		DisableCompression:  true,
	}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Minute}
	base := "http://" + ln.Addr().String()

	var (
		mu  sync.Mutex
		res lossyResult
	)
	if !fresh {
		// Dial the connections first: setting up 32 at once is not what
		// is measured here.
		var wg sync.WaitGroup
		for i := range lossyConcurrency {
			wg.Go(func() {
				if _, err := lossyRequest(client, base+"/warm-up", i); err != nil {
					mu.Lock()
					res.errors = append(res.errors, fmt.Errorf("warm-up request %d: %w", i, err))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	dialled := dials.Load()
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range lossyConcurrency {
		wg.Go(func() {
			for i := range next {
				d, err := lossyRequest(client, base+"/echo", i)
				mu.Lock()
				if err != nil {
					res.errors = append(res.errors, fmt.Errorf("request %d (%d bytes): %w", i, lossySizes[i%len(lossySizes)], err))
				} else {
					res.latencies = append(res.latencies, d)
				}
				mu.Unlock()
			}
		})
	}
	for i := range lossyRequests {
		next <- i
	}
	close(next)
	wg.Wait()
	res.wall = time.Since(start)
	res.dials = dials.Load() - dialled
	tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv.Shutdown(ctx)
	<-served
	return res
}

func lossyRequest(client *http.Client, url string, i int) (time.Duration, error) {
	n := lossySizes[i%len(lossySizes)]
	off := i * 4099 % (len(pool) - n)
	want := pool[off : off+n]
	start := time.Now()
	resp, err := client.Post(url, "application/octet-stream", bytes.NewReader(want))
	if err != nil {
		return 0, err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	switch {
	case err != nil:
		return 0, err
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("status %s: %.200s", resp.Status, got)
	case !bytes.Equal(got, want):
		return 0, errors.New("the response is not the body sent")
	}
	return d, nil
}

var droppedRE = regexp.MustCompile(`dropped (\d+)`)

// netemDropped is how many packets rvm0's root qdisc has dropped so far.
func netemDropped(tb testing.TB) int {
	out, err := exec.Command("tc", "-s", "qdisc", "show", "dev", "rvm0").CombinedOutput()
	if err != nil {
		tb.Fatalf("tc -s qdisc show dev rvm0: %v: %s", err, out)
	}
	m := droppedRE.FindSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// rxeCounters are Soft-RoCE's hardware counters of the lab's two devices,
// summed: zero where they cannot be read (hardware, or no rxe).
type rxeCounters struct {
	sent       int64 // sent_pkts
	retries    int64 // completer_retry_err: go-back-N resends started, on a timeout or a NAK
	nakRetries int64 // rcvd_seq_err: those a sequence-error NAK started
	duplicates int64 // duplicate_request: packets a responder had already seen
	backlog    int64 // packets the kernel dropped for a full input backlog (/proc/net/softnet_stat), netem aside
}

func readRXECounters() rxeCounters {
	var c rxeCounters
	for _, dev := range []string{"rxe0", "rxe1"} {
		read := func(name string) int64 {
			b, err := os.ReadFile("/sys/class/infiniband/" + dev + "/ports/1/hw_counters/" + name)
			if err != nil {
				return 0
			}
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n
		}
		c.sent += read("sent_pkts")
		c.retries += read("completer_retry_err")
		c.nakRetries += read("rcvd_seq_err")
		c.duplicates += read("duplicate_request")
	}
	if b, err := os.ReadFile("/proc/net/softnet_stat"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				n, _ := strconv.ParseInt(f[1], 16, 64)
				c.backlog += n
			}
		}
	}
	return c
}

func (c rxeCounters) add(o rxeCounters) rxeCounters {
	return rxeCounters{c.sent + o.sent, c.retries + o.retries, c.nakRetries + o.nakRetries, c.duplicates + o.duplicates, c.backlog + o.backlog}
}

func (c rxeCounters) sub(o rxeCounters) rxeCounters {
	return rxeCounters{c.sent - o.sent, c.retries - o.retries, c.nakRetries - o.nakRetries, c.duplicates - o.duplicates, c.backlog - o.backlog}
}
