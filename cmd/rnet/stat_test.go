package main

import (
	"bytes"
	"context"
	"encoding/json"
	"expvar"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnettest"
)

// TestStatShowsPublishedMetrics: rnet stat reads a process's /debug/vars
// (this test's, over the test fabric) and shows its listener, each open
// connection with its bytes, the open connections by transport and
// device, gauges and counters as tables, or as JSON with --json.
func TestStatShowsPublishedMetrics(t *testing.T) {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", "10.0.0.2:7471")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := f.DialContext(context.Background(), "rdma", "10.0.0.2:7471")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	msg := []byte("hello, stat")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, make([]byte, len(msg))); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(expvar.Handler())
	defer srv.Close()
	want := rnet.ReadMetrics()

	var stdout, stderr bytes.Buffer
	if code := run([]string{"stat", strings.TrimPrefix(srv.URL, "http://")}, &stdout, &stderr); code != 0 {
		t.Fatalf("rnet stat: exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	t.Logf("rnet stat:\n%s", out)
	simulated := int64(-1)
	for _, o := range want.Gauges.Connections {
		if o.Transport == "rdma" && o.Device == "simulated" {
			simulated = o.Count
		}
	}
	if simulated < 2 {
		t.Fatalf("ReadMetrics counts %d open simulated connections with these 2 open", simulated)
	}
	for _, line := range []string{
		fmt.Sprintf(`(?m)^rdma\s+simulated\s+%d$`, simulated),
		fmt.Sprintf(`(?m)^accepts\s+%d\s*$`, want.Counters.Accepts),
		fmt.Sprintf(`(?m)^queue_pairs\s+%d$`, want.Gauges.QueuePairs),
		`(?m)^handshake_errors\s+\d+\s`,
		`(?m)^Transport\s+Device\s+Open$`,
		`(?m)^10\.0\.0\.2:7471\s+1\s+0\s+0\s+0\s+0$`,
		fmt.Sprintf(`(?m)^rdma\s+simulated\s+%s\s+%s\s+0\s+0\s+%d\s+\d+$`, regexp.QuoteMeta(c.LocalAddr().String()), regexp.QuoteMeta(c.RemoteAddr().String()), len(msg)),
		fmt.Sprintf(`(?m)^rdma\s+simulated\s+%s\s+%s\s+0\s+%d\s+0\s+\d+$`, regexp.QuoteMeta(s.LocalAddr().String()), regexp.QuoteMeta(s.RemoteAddr().String()), len(msg)),
	} {
		if !regexp.MustCompile(line).MatchString(out) {
			t.Errorf("rnet stat shows no line matching %s", line)
		}
	}

	stdout.Reset()
	if code := run([]string{"stat", "--json", srv.URL + "/debug/vars"}, &stdout, &stderr); code != 0 {
		t.Fatalf("rnet stat --json: exit %d: %s", code, stderr.String())
	}
	var got published
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("rnet stat --json: %v: %s", err, stdout.String())
	}
	if got.Counters.Accepts != want.Counters.Accepts || len(got.Gauges.Connections) != len(want.Gauges.Connections) {
		t.Errorf("rnet stat --json read %+v, want %+v", got.Metrics, want)
	}
	if got.Sockets == nil {
		t.Fatal("rnet stat --json shows no sockets")
	}
	listed := 0
	for _, sc := range got.Sockets.Connections {
		if sc.Local == c.LocalAddr().String() && sc.BytesWritten == uint64(len(msg)) || sc.Local == s.LocalAddr().String() && sc.BytesRead == uint64(len(msg)) {
			listed++
		}
	}
	if listed != 2 || !slices.ContainsFunc(got.Sockets.Listeners, func(l rnet.ListenerSocket) bool { return l.Address == "10.0.0.2:7471" }) {
		t.Errorf("rnet stat --json read sockets %+v, want the listener and the 2 connections with their bytes", got.Sockets)
	}
}

// TestStatWithoutRnetVariable: a /debug/vars without the rnet variable
// fails with a line that says so.
func TestStatWithoutRnetVariable(t *testing.T) {
	srv := httptest.NewServer(http404OrEmpty{})
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"stat", srv.URL}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), `no "rnet" variable`) {
		t.Errorf("rnet stat of a process without rnet: exit %d, %q", code, stderr.String())
	}
	if code := run([]string{"stat"}, &stdout, &stderr); code != 2 {
		t.Errorf("rnet stat without a URL: exit %d, want 2", code)
	}
}

// http404OrEmpty serves an expvar page with no variables.
type http404OrEmpty struct{}

func (http404OrEmpty) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Write([]byte("{}\n"))
}

// TestStatSaysHowManyConnectionsAreLeftOut: when the process's
// "rnet_sockets" lists only some of its connections, rnet stat shows those
// and a line with how many more there are; --json keeps the count.
func TestStatSaysHowManyConnectionsAreLeftOut(t *testing.T) {
	for _, tt := range []struct {
		more int
		line string
	}{
		{0, ""},
		{1, "... and 1 more connection\n"},
		{1234, "... and 1234 more connections\n"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, `{"rnet": {}, "rnet_sockets": {"listeners": [], "connections": [
				{"transport": "rdma", "device": "rxe0", "local": "10.0.0.1:40000", "remote": "10.0.0.2:7471", "qp_number": 17}],
				"more_connections": %d}}`, tt.more)
		}))
		var stdout, stderr bytes.Buffer
		code := run([]string{"stat", srv.URL}, &stdout, &stderr)
		if code != 0 {
			t.Fatalf("rnet stat: exit %d: %s", code, stderr.String())
		}
		// The line, if any, ends the connections' table.
		want := regexp.MustCompile(`(?m)^rdma\s+rxe0\s+10\.0\.0\.1:40000\s+10\.0\.0\.2:7471\s+17\s+0\s+0\s+0\n` + regexp.QuoteMeta(tt.line) + `\n`)
		if !want.MatchString(stdout.String()) || tt.more == 0 && strings.Contains(stdout.String(), "more connection") {
			t.Errorf("%d more: rnet stat shows\n%s\nwant the connection's row, then %q", tt.more, stdout.String(), tt.line)
		}

		stdout.Reset()
		if code := run([]string{"stat", "--json", srv.URL}, &stdout, &stderr); code != 0 {
			t.Fatalf("rnet stat --json: exit %d: %s", code, stderr.String())
		}
		var got published
		if err := json.Unmarshal(stdout.Bytes(), &got); err != nil || got.Sockets == nil || got.Sockets.MoreConnections != tt.more {
			t.Errorf("rnet stat --json read %s (%v); want sockets with %d more connections", stdout.String(), err, tt.more)
		}
		srv.Close()
	}
}
