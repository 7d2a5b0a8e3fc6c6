//go:build linux && cgo

package compat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/testcert"
)

// TestHTTP2OverTLS: an unmodified http.Server serves TLS on an rnet
// listener and an http.Transport dialling rnet negotiates h2 by ALPN; every
// request, concurrent on the one connection, comes back over HTTP/2 with
// its body intact.
func TestHTTP2OverTLS(t *testing.T) {
	pair := requirePair(t)
	ln := listen(t, pair)
	serverCfg, clientCfg := testcert.New(t, pair.Server.String())
	serverCfg.NextProtos = []string{"h2", "http/1.1"}

	mux := http.NewServeMux()
	// POST /echo?seed=S&n=N answers with payload(S+1, N) once the request
	// body is payload(S, N).
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || r.TLS == nil || r.TLS.NegotiatedProtocol != "h2" {
			http.Error(w, fmt.Sprintf("request over %s, TLS %v", r.Proto, r.TLS != nil), http.StatusBadRequest)
			return
		}
		seed, err1 := strconv.ParseUint(r.URL.Query().Get("seed"), 10, 64)
		n, err2 := strconv.Atoi(r.URL.Query().Get("n"))
		if err1 != nil || err2 != nil {
			http.Error(w, "bad query", http.StatusBadRequest)
			return
		}
		body, err := readBody(r.Body, n)
		if err != nil || !bytes.Equal(body, payload(seed, n)) {
			http.Error(w, fmt.Sprintf("request body: %d bytes that are not the %d sent (%v)", len(body), n, err), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(payload(seed+1, n))
	})
	srv := &http.Server{Handler: mux, TLSConfig: serverCfg}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()

	// A custom DialContext turns HTTP/2 off unless it is asked for.
	tr := &http.Transport{DialContext: dialer(pair), TLSClientConfig: clientCfg, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 3 * time.Minute}
	base := "https://" + ln.Addr().String()

	var wg sync.WaitGroup
	for i := range 20 {
		n := []int{0, 1, 4095, 65537, 1 << 20}[i%5]
		wg.Go(func() {
			seed := uint64(i) * 7919
			resp, err := client.Post(fmt.Sprintf("%s/echo?seed=%d&n=%d", base, seed, n), "application/octet-stream", bytes.NewReader(payload(seed, n)))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			got, err := readBody(resp.Body, n)
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "h2" {
				t.Errorf("request %d: %s over %s, TLS %v: %s", i, resp.Status, resp.Proto, resp.TLS != nil, got)
				return
			}
			if err != nil || !bytes.Equal(got, payload(seed+1, n)) {
				t.Errorf("request %d: response of %d bytes, not the %d sent (%v)", i, len(got), n, err)
			}
		})
	}
	wg.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("ServeTLS returned %v, want http.ErrServerClosed", err)
	}
}
