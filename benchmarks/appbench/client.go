package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/rnet-dev/rnet/internal/perfjson"
	"github.com/rnet-dev/rnet/rnet/rnetgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// workload is one measurement: calls calls of size bytes from conc callers.
type workload struct {
	name  string // grpc-unary, grpc-stream, http1, http2
	size  int
	conc  int
	calls int // before -scale
}

func (w workload) id() string { return fmt.Sprintf("%s/%d/c%d", w.name, w.size, w.conc) }

// workloads are the default list: at scale 1 each takes a few seconds in
// the emulated lab, where a gRPC unary call takes about 8 ms.
func workloads() []workload {
	var list []workload
	for _, size := range []int{64, 4 << 10} {
		list = append(list, workload{"grpc-unary", size, 1, 200}, workload{"grpc-unary", size, 32, 600})
	}
	list = append(list, workload{"grpc-stream", 64 << 10, 1, 150})
	for _, proto := range []string{"http1", "http2"} {
		for _, s := range []struct{ size, calls int }{{1, 400}, {4 << 10, 400}, {64 << 10, 200}, {256 << 10, 60}} {
			list = append(list, workload{proto, s.size, 32, s.calls})
		}
	}
	return list
}

// client runs workloads against one appbench server.
type client struct {
	t        *transport
	grpcAddr string // the server's gRPC address; its HTTP port is the next one
	httpAddr string
	ctl      *grpc.ClientConn // for the server's counters, apart from the workloads
	syscalls *syscallCounter
}

// newClient connects to the server; with perf, the path of perf, it counts
// every system call of each workload.
func newClient(t *transport, grpcAddr, httpAddr, perf string) (*client, error) {
	cl := &client{t: t, grpcAddr: grpcAddr, httpAddr: httpAddr, syscalls: newSyscallCounter(perf)}
	cc, err := cl.grpcConn()
	if err != nil {
		return nil, err
	}
	cl.ctl = cc
	return cl, nil
}

func (cl *client) Close() error { return cl.ctl.Close() }

// grpcConn is a ClientConn to the server over the client's transport.
func (cl *client) grpcConn() (*grpc.ClientConn, error) {
	dial := func(ctx context.Context, addr string) (net.Conn, error) { return cl.t.Dial(ctx, "", addr) }
	if !cl.t.tcp && cl.t.dial == nil {
		var opts []rnetgrpc.Option
		if cl.t.from != nil {
			opts = append(opts, rnetgrpc.WithLocalAddr(&net.TCPAddr{IP: cl.t.from}))
		}
		rdial := rnetgrpc.Dialer(nil, opts...)
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := rdial(ctx, addr)
			if err == nil {
				cl.t.track(c)
			}
			return c, err
		}
	}
	return grpc.NewClient("passthrough:///"+cl.grpcAddr, grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(codecName)))
}

// serverCounters asks the server for its totals at the beginning or the
// end (which) of a workload.
func (cl *client) serverCounters(ctx context.Context, which string) (counters, error) {
	var c counters
	req, resp := []byte(which), []byte(nil)
	if err := cl.ctl.Invoke(ctx, methodCounters, &req, &resp); err != nil {
		return c, fmt.Errorf("the server's counters: %w", err)
	}
	if err := json.Unmarshal(resp, &c); err != nil {
		return c, fmt.Errorf("the server's counters %q: %w", resp, err)
	}
	return c, nil
}

// stopServer asks the server to exit.
func (cl *client) stopServer(ctx context.Context) error {
	var req, resp []byte
	return cl.ctl.Invoke(ctx, methodStop, &req, &resp)
}

// run measures w with calls calls (after a warm-up that opens the
// connections), with both sides' work per call.
func (cl *client) run(ctx context.Context, w workload, calls int) (perfjson.AppResult, error) {
	res := perfjson.AppResult{Test: "app", Transport: cl.t.name(), Workload: w.name, Size: w.size, Concurrency: w.conc}
	call, stream, done, err := cl.prepare(ctx, w)
	if err != nil {
		return res, err
	}
	defer done()
	if call != nil {
		// Warm up: every caller makes a call, so that every connection is
		// open and every buffer grown before the counting starts.
		if _, err := runCalls(ctx, w.conc, 2*w.conc, call); err != nil {
			return res, fmt.Errorf("%s: warm-up: %w", w.id(), err)
		}
	}
	srvBefore, err := cl.serverCounters(ctx, countersBegin)
	if err != nil {
		return res, err
	}
	before, err := beginWork(&cl.t.conns, cl.syscalls)
	if err != nil {
		return res, err
	}
	var st callStats
	if call != nil {
		st, err = runCalls(ctx, w.conc, calls, call)
	} else {
		st, err = stream(ctx, calls)
	}
	if err != nil {
		cl.syscalls.end()
		return res, fmt.Errorf("%s: %w", w.id(), err)
	}
	after, err := endWork(&cl.t.conns, cl.syscalls)
	if err != nil {
		return res, err
	}
	srvAfter, err := cl.serverCounters(ctx, countersEnd)
	if err != nil {
		return res, err
	}
	secs := st.elapsed.Seconds()
	res.Calls, res.Seconds = st.calls, secs
	res.CallsPerSec = float64(st.calls) / secs
	res.MBps = float64(st.calls) * float64(w.size) / secs / 1e6
	res.P50Us, res.P99Us = us(st.p50), us(st.p99)
	res.Client, res.Server = perCall(before, after, st.calls), perCall(srvBefore, srvAfter, st.calls)
	return res, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// prepare makes w's client: a function making one call, or for a stream a
// function receiving n messages; done releases it.
func (cl *client) prepare(ctx context.Context, w workload) (call func(context.Context, int) error, stream func(context.Context, int) (callStats, error), done func(), err error) {
	switch w.name {
	case "grpc-unary", "grpc-stream":
		cc, err := cl.grpcConn()
		if err != nil {
			return nil, nil, nil, err
		}
		if w.name == "grpc-stream" {
			if err := echo(ctx, cc, 0, 64); err != nil { // the warm-up: connect
				cc.Close()
				return nil, nil, nil, fmt.Errorf("%s: warm-up: %w", w.id(), err)
			}
			return nil, func(ctx context.Context, n int) (callStats, error) { return download(ctx, cc, n, w.size) }, func() { cc.Close() }, nil
		}
		return func(ctx context.Context, n int) error { return echo(ctx, cc, n, w.size) }, nil, func() { cc.Close() }, nil
	case "http1", "http2":
		tr := &http.Transport{DialContext: cl.t.Dial, MaxIdleConnsPerHost: w.conc, MaxConnsPerHost: w.conc, DisableCompression: true}
		if w.name == "http2" {
			tr.Protocols = new(http.Protocols)
			tr.Protocols.SetUnencryptedHTTP2(true)
		}
		hc := &http.Client{Transport: tr}
		proto := 1
		if w.name == "http2" {
			proto = 2
		}
		url := "http://" + cl.httpAddr + dataPath + "?size=" + strconv.Itoa(w.size) + "&seed="
		return func(ctx context.Context, n int) error { return fetch(ctx, hc, url, proto, n, w.size) }, nil, tr.CloseIdleConnections, nil
	}
	return nil, nil, nil, fmt.Errorf("unknown workload %q", w.name)
}

// echo makes one unary call of size bytes and checks that the same bytes
// came back.
func echo(ctx context.Context, cc *grpc.ClientConn, n, size int) error {
	req := make([]byte, size)
	fillPattern(req, uint32(n))
	var resp []byte
	if err := cc.Invoke(ctx, methodEcho, &req, &resp); err != nil {
		return err
	}
	if !bytes.Equal(resp, req) {
		return checkPattern(resp, uint32(n), size)
	}
	return nil
}

// download streams n messages of size bytes from the server and checks
// every one.
func download(ctx context.Context, cc *grpc.ClientConn, n, size int) (callStats, error) {
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, methodDownload)
	if err != nil {
		return callStats{}, err
	}
	req := downloadRequest(n, size)
	if err := s.SendMsg(&req); err != nil {
		return callStats{}, err
	}
	if err := s.CloseSend(); err != nil {
		return callStats{}, err
	}
	var msg []byte
	for i := range n {
		if err := s.RecvMsg(&msg); err != nil {
			return callStats{}, fmt.Errorf("message %d of %d: %w", i, n, err)
		}
		if err := checkPattern(msg, uint32(i), size); err != nil {
			return callStats{}, fmt.Errorf("message %d of %d: %w", i, n, err)
		}
	}
	if err := s.RecvMsg(&msg); err != io.EOF {
		return callStats{}, fmt.Errorf("after %d messages: %v, want the end of the stream", n, err)
	}
	return callStats{calls: int64(n), elapsed: time.Since(start)}, nil
}

// fetch makes one HTTP request (HTTP/proto) for size bytes of seed n's
// pattern and checks every byte of the body.
func fetch(ctx context.Context, hc *http.Client, url string, proto, n, size int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+strconv.Itoa(n), nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != proto {
		return fmt.Errorf("%s: answered over %s, want HTTP/%d", req.URL, resp.Proto, proto)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(size)+1))
	if err != nil {
		return fmt.Errorf("%s: %w", req.URL, err)
	}
	if err := checkPattern(body, uint32(n), size); err != nil {
		return fmt.Errorf("%s: %w", req.URL, err)
	}
	return nil
}
