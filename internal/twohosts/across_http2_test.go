package twohosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/hostlab"
)

func init() { roles["across-http2-server"] = http2ServerRole }

// http2Concurrent requests run at once, each with a request and a response
// body of up to http2MaxBody bytes.
const (
	http2Concurrent = 32
	http2MaxBody    = 256 << 10
)

// TestHTTP2BetweenHosts: an unencrypted HTTP/2 server over rnet on host B,
// and 32 concurrent requests at a time from host A over IPv4 and IPv6, with
// bodies up to 256 KiB both ways, every byte checked at both ends.
func TestHTTP2BetweenHosts(t *testing.T) {
	needLab(t)
	l := labFor(t, hostlab.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	server, addrs := startServerRole(t, ctx, l.B, "across-http2-server")
	runAcrossGuest(t, ctx, l.A, "TestAcrossGuestHTTP2", targetsEnv(addrs), serverHostEnv+"=rnet-"+l.B.Name)
	stopServerRole(t, ctx, server, "across-http2-server")
}

// h2Only speaks HTTP/2 and nothing else, without TLS, so that an answer at
// all shows that both sides spoke HTTP/2.
func h2Only() *http.Protocols {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &p
}

// TestAcrossGuestHTTP2 is TestHTTP2BetweenHosts's client on host A.
func TestAcrossGuestHTTP2(t *testing.T) {
	inGuest(t)
	for _, target := range acrossTargets(t) {
		t.Run(family(target), func(t *testing.T) {
			local := hostAddr(t, target)
			// DialConn dials the transport's "tcp" over RDMA.
			tr := &http.Transport{Protocols: h2Only(), DialContext: dialerFrom(local).DialConn}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 3 * time.Minute}
			for round := range 2 {
				var wg sync.WaitGroup
				errs := make(chan error, http2Concurrent)
				for i := range http2Concurrent {
					wg.Add(1)
					go func() {
						defer wg.Done()
						// Request bodies grow and responses shrink across
						// the batch, both from 0 to 256 KiB.
						in := i * http2MaxBody / (http2Concurrent - 1)
						out := http2MaxBody - in
						seed := uint64(1000*round + i)
						if err := http2Request(client, target, local, seed, in, out); err != nil {
							errs <- fmt.Errorf("round %d, request %d (%d B up, %d B down): %w", round, i, in, out, err)
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
			}
		})
	}
}

// http2Request posts in bytes named by seed and checks the out bytes that
// come back, and who answered whom over which protocol.
func http2Request(client *http.Client, target netip.AddrPort, local netip.Addr, seed uint64, in, out int) error {
	url := fmt.Sprintf("http://%v/xfer?seed=%d&in=%d&out=%d", target, seed, in, out)
	resp, err := client.Post(url, "application/octet-stream", bytes.NewReader(pattern(seed, in)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading the response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	if resp.ProtoMajor != 2 {
		return fmt.Errorf("answered over %s, want HTTP/2", resp.Proto)
	}
	if got, want := resp.Header.Get("X-Across-Host"), os.Getenv(serverHostEnv); got != want {
		return fmt.Errorf("served by %q, want %q", got, want)
	}
	if from, err := netip.ParseAddrPort(resp.Header.Get("X-Across-Remote")); err != nil || from.Addr() != local {
		return fmt.Errorf("the server saw the request come from %q, want %v", resp.Header.Get("X-Across-Remote"), local)
	}
	return checkPattern("response", seed+1, body, out)
}

// http2ServerRole serves /xfer over HTTP/2 on rnet listeners until SIGTERM.
func http2ServerRole() int {
	stop := terminated()
	lns, err := acrossListen()
	if err != nil {
		fmt.Fprintln(os.Stderr, "across-http2-server:", err)
		return 1
	}
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.Handle("POST /xfer", xferHandler(host))
	srv := &http.Server{Handler: mux, Protocols: h2Only(), ReadHeaderTimeout: time.Minute}
	served := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { served <- srv.Serve(ln) }()
	}
	code := 0
	select {
	case <-stop:
	case err := <-served:
		fmt.Fprintln(os.Stderr, "across-http2-server: Serve:", err)
		code = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "across-http2-server: Shutdown:", err)
		code = 1
	}
	return code
}

// xferHandler checks the request body named by the query's seed and in and
// answers with out bytes named by seed+1, saying who it is and whom it saw.
func xferHandler(host string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		seed, err1 := strconv.ParseUint(q.Get("seed"), 10, 64)
		in, err2 := strconv.Atoi(q.Get("in"))
		out, err3 := strconv.Atoi(q.Get("out"))
		if err := errors.Join(err1, err2, err3); err != nil || out < 0 || out > http2MaxBody {
			http.Error(w, fmt.Sprintf("bad query %q: %v", r.URL.RawQuery, err), http.StatusBadRequest)
			return
		}
		if r.ProtoMajor != 2 {
			http.Error(w, "asked over "+r.Proto, http.StatusHTTPVersionNotSupported)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, http2MaxBody+1))
		if err == nil {
			err = checkPattern("request", seed, body, in)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Across-Host", host)
		w.Header().Set("X-Across-Remote", r.RemoteAddr)
		w.Write(pattern(seed+1, out))
	}
}
