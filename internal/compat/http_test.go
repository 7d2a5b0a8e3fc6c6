//go:build linux && cgo

package compat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// httpSizes are the request and response body sizes, cycled over the
// concurrent requests; one request carries 16 MiB each way and one 1 MiB.
// (Under -race in the emulated guest every byte costs, so the rest are small.)
var httpSizes = []int{0, 1, 100, 4095, 4096, 65537, 256 << 10}

const (
	httpRequests = 50
	bigBody      = 16 << 20
)

func bodySize(i int) int {
	switch i {
	case 7:
		return bigBody
	case 33:
		return 1 << 20
	}
	return httpSizes[i%len(httpSizes)]
}

func TestHTTP1(t *testing.T) {
	var p http.Protocols
	p.SetHTTP1(true)
	testHTTP(t, p, 1)
}

func TestHTTP2Unencrypted(t *testing.T) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	testHTTP(t, p, 2)
}

// testHTTP runs an unmodified http.Server on an rnet listener that speaks
// HTTP/1.1 and unencrypted HTTP/2, and an http.Transport that dials rnet and
// speaks clientProtos, which must come out as HTTP/wantMajor.
func testHTTP(t *testing.T, clientProtos http.Protocols, wantMajor int) {
	pair := requirePair(t)
	ln := listen(t, pair)

	mux := http.NewServeMux()
	// POST /echo?seed=S&n=N: checks that the request body is payload(S, N)
	// and answers with payload(S+1, N), or 400 with what differed.
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err != nil || host != pair.Client.String() {
			t.Errorf("RemoteAddr = %q, want host %s", r.RemoteAddr, pair.Client)
		}
		seed, err1 := strconv.ParseUint(r.URL.Query().Get("seed"), 10, 64)
		n, err2 := strconv.Atoi(r.URL.Query().Get("n"))
		if err1 != nil || err2 != nil {
			http.Error(w, "bad query", http.StatusBadRequest)
			return
		}
		body, err := readBody(r.Body, n)
		if err != nil {
			t.Errorf("server reading body: %v", err)
			return
		}
		if !bytes.Equal(body, payload(seed, n)) {
			http.Error(w, fmt.Sprintf("request body: %d bytes that are not the %d sent", len(body), n), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		if _, err := w.Write(payload(seed+1, n)); err != nil {
			t.Errorf("server writing body: %v", err)
		}
	})
	// GET /abort: promises a body, sends part of it, and aborts.
	mux.HandleFunc("GET /abort", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("early") == "" {
			w.Header().Set("Content-Length", "100000")
			w.Write([]byte("partial body"))
			w.(http.Flusher).Flush()
		}
		panic(http.ErrAbortHandler)
	})

	var serverProtos http.Protocols
	serverProtos.SetHTTP1(true)
	serverProtos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &serverProtos}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	tr := &http.Transport{Protocols: &clientProtos, DialContext: dialer(pair)}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 3 * time.Minute}
	base := "http://" + ln.Addr().String()

	echo := func(seed uint64, n int) error {
		req, err := http.NewRequest("POST", fmt.Sprintf("%s/echo?seed=%d&n=%d", base, seed, n), bytes.NewReader(payload(seed, n)))
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != wantMajor {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
			return fmt.Errorf("status %s, protocol %s; want 200 over HTTP/%d: %s", resp.Status, resp.Proto, wantMajor, msg)
		}
		got, err := readBody(resp.Body, n)
		if err != nil {
			return fmt.Errorf("reading response: %v", err)
		}
		if !bytes.Equal(got, payload(seed+1, n)) {
			return fmt.Errorf("response body: %d bytes, not the %d sent", len(got), n)
		}
		return nil
	}

	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range httpRequests {
			wg.Go(func() {
				if err := echo(uint64(i)*7919, bodySize(i)); err != nil {
					t.Errorf("request %d (%d bytes): %v", i, bodySize(i), err)
				}
			})
		}
		wg.Wait()
	})

	t.Run("abort", func(t *testing.T) {
		for _, early := range []bool{false, true} {
			url := base + "/abort"
			if early {
				url += "?early=1"
			}
			resp, err := client.Get(url)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if err == nil {
				t.Errorf("GET %s: the client saw no error from the aborted handler", url)
			} else {
				t.Logf("GET %s: %v (as expected)", url, err)
			}
			// The server keeps serving.
			if err := echo(uint64(1000+len(url)), 70000); err != nil {
				t.Errorf("request after the abort: %v", err)
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
	}
}

// readBody reads all of r, expecting n bytes.
func readBody(r io.Reader, n int) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(n + 1)
	_, err := b.ReadFrom(r)
	return b.Bytes(), err
}
