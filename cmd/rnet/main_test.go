package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"
	"github.com/rnet-dev/rnet/internal/perfjson"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/rnet"
)

// TestMain lets the test binary act as the rnet command, so device tests run
// it as a child process in the guest without building anything there.
func TestMain(m *testing.M) {
	if os.Getenv("RNET_CMD_AS_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestParsePerf(t *testing.T) {
	cases := []struct {
		args []string
		ok   bool
		want perfOpts
	}{
		{[]string{"-s"}, true, perfOpts{server: true, addr: ":7471"}},
		{[]string{"-s", "10.77.0.2", "--json"}, true, perfOpts{server: true, addr: "10.77.0.2:7471", json: true}},
		{[]string{"-s", "--json", "10.77.0.2:9000", "-once", "-tcp"}, true, perfOpts{server: true, addr: "10.77.0.2:9000", json: true, once: true, tcp: true}},
		{[]string{"-s", "[fd77::2]:9000"}, true, perfOpts{server: true, addr: "[fd77::2]:9000"}},
		{[]string{"-s", "fd77::2"}, true, perfOpts{server: true, addr: "[fd77::2]:7471"}},
		{[]string{"-s", "-hello-timeout", "1s", "-idle-timeout", "2s", "-max-conns", "3", "-max-pinned", "4M", "-max-buffered", "5M"}, true,
			perfOpts{server: true, addr: ":7471", limits: serverLimits{time.Second, 2 * time.Second, 3, 4 << 20, 5 << 20}}},
		{[]string{"-c", "10.77.0.2", "-size", "4096", "-n", "1000000", "-from", "10.77.0.1"}, true,
			perfOpts{addr: "10.77.0.2:7471", client: "10.77.0.2", size: 4096, bytes: 1000000, from: "10.77.0.1"}},
		{[]string{"-c", "host.example:1234", "-t", "3s", "-tcp"}, true, perfOpts{addr: "host.example:1234", client: "host.example:1234", duration: 3 * time.Second, tcp: true}},
		{nil, false, perfOpts{}},
		{[]string{"-s", "-c", "x"}, false, perfOpts{}},
		{[]string{"-c", "x", "extra"}, false, perfOpts{}},
		{[]string{"-c", "x", "-size", "0"}, false, perfOpts{}},
		{[]string{"-c", "x:notaport"}, false, perfOpts{}},
		{[]string{"-c", "x", "-bogus"}, false, perfOpts{}},
		{[]string{"-s", "a", "b"}, false, perfOpts{}},
		{[]string{"-s", "-max-conns", "0"}, false, perfOpts{}},
		{[]string{"-s", "-idle-timeout", "-1s"}, false, perfOpts{}},
	}
	for _, c := range cases {
		got, err := parsePerf(c.args)
		if (err == nil) != c.ok {
			t.Errorf("parsePerf(%q) error = %v, want ok=%v", c.args, err, c.ok)
			continue
		}
		if !c.ok {
			if !errors.Is(err, errUsage) || err.Error() == "" {
				t.Errorf("parsePerf(%q) = %v, want errUsage and a message", c.args, err)
			}
			continue
		}
		// Compare the fields the case sets; defaults elsewhere.
		want := c.want
		if want.size == 0 {
			want.size = 64 << 10
		}
		if want.duration == 0 {
			want.duration = 10 * time.Second
		}
		want.interval = time.Second
		if want.parallel == 0 {
			want.parallel = 1
		}
		if want.limits == (serverLimits{}) {
			want.limits = defaultServerLimits()
		}
		if got != want {
			t.Errorf("parsePerf(%q) = %+v, want %+v", c.args, got, want)
		}
	}
}

func TestParsePing(t *testing.T) {
	o, err := parsePing([]string{"10.77.0.2", "-size", "4096", "-c", "50", "--json", "-from", "10.77.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	want := pingOpts{addr: "10.77.0.2:7471", from: "10.77.0.1", size: 4096, count: 50, warmup: 100, progressEvery: time.Second, json: true}
	if o != want {
		t.Errorf("got %+v, want %+v", o, want)
	}
	for _, bad := range [][]string{nil, {"a", "b"}, {"a", "-n", "0"}, {"a", "-size", "-1"}} {
		if _, err := parsePing(bad); !errors.Is(err, errUsage) {
			t.Errorf("parsePing(%q) = %v, want errUsage", bad, err)
		}
	}
}

func TestRunExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{nil, 2}, {[]string{"nope"}, 2}, {[]string{"help"}, 0}, {[]string{"perf", "-h"}, 0},
		{[]string{"perf"}, 2}, {[]string{"ping"}, 2}, {[]string{"devices", "x"}, 2},
	} {
		var out, errb bytes.Buffer
		if got := run(c.args, &out, &errb); got != c.code {
			t.Errorf("run(%q) = %d, want %d (stderr %q)", c.args, got, c.code, errb.String())
		}
	}
}

func TestHello(t *testing.T) {
	h := hello{mode: modePing, stream: 2, streams: 3, size: 4096, test: 7}
	got, err := decodeHello(h.encode())
	if err != nil || got != h {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
	if _, err := decodeHello([]byte("GET / HTTP/1.1\r\n")); err == nil {
		t.Error("an HTTP request decoded as a hello")
	}
	bad := hello{mode: modePerf, size: maxSize + 1}.encode()
	if _, err := decodeHello(bad); err == nil {
		t.Error("oversized hello accepted")
	}
}

func TestDevicesJSON(t *testing.T) {
	var gid [16]byte
	copy(gid[10:], []byte{0xff, 0xff, 10, 77, 0, 1})
	infos := []verbs.DeviceInfo{{
		Name: "rxe0", Transport: verbs.TransportRoCE, MaxQPWR: 1 << 20, MaxInlineData: 512,
		Ports: []verbs.PortInfo{{Num: 1, State: verbs.PortActive, LinkLayer: verbs.LinkLayerEthernet, ActiveMTU: 1024, MaxMTU: 4096,
			GIDs: []verbs.GIDEntry{{Index: 1, Type: verbs.GIDTypeRoCEv2, GID: gid, Addr: netip.MustParseAddr("10.77.0.1"), Ifindex: 7}}}},
	}}
	devs := describe(infos, func(i int) string { return map[int]string{7: "rvm0"}[i] })
	data, err := json.Marshal(devs)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"name":"rxe0","transport":"RoCE","node_guid":"0000:0000:0000:0000","max_qp":0,"max_qp_wr":1048576,"max_sge":0,"max_inline_data":512,` +
		`"ports":[{"port":1,"state":"ACTIVE","link_layer":"Ethernet","active_mtu":1024,"max_mtu":4096,"max_msg_size":0,` +
		`"gids":[{"index":1,"gid":"::ffff:10.77.0.1","type":"RoCE v2","ip":"10.77.0.1","netdev":"rvm0"}]}]}]`
	if string(data) != want {
		t.Errorf("JSON:\n got %s\nwant %s", data, want)
	}
	var text bytes.Buffer
	printDevices(&text, devs)
	for _, s := range []string{"rxe0  RoCE", "port 1  ACTIVE  Ethernet  mtu 1024 (max 4096)", "::ffff:10.77.0.1", "10.77.0.1", "rvm0", "RoCE v2"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text output lacks %q:\n%s", s, text.String())
		}
	}
}

func TestPerfJSON(t *testing.T) {
	var out bytes.Buffer
	r := perfjson.PerfResult{Test: "perf", Transport: "tcp", Size: 64, Writes: 2, Bytes: 128, Seconds: 1, MBps: 0.000128}
	if err := printPerf(&out, true, r); err != nil {
		t.Fatal(err)
	}
	var back perfjson.PerfResult
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || !reflect.DeepEqual(back, r) {
		t.Errorf("JSON round trip = %+v, %v (from %s)", back, err, out.String())
	}
	if strings.Contains(out.String(), "stats") || strings.Contains(out.String(), "cgo") {
		t.Errorf("TCP result carries RDMA fields: %s", out.String())
	}
	// The text form of an RDMA result says how its calls waited.
	out.Reset()
	r.Transport, r.Stats, r.CgoPerWrite = "rdma", &rnet.Stats{Spins: 7, Parks: 3}, 1.5
	if err := printPerf(&out, false, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "2 writes of 64 B") || !strings.Contains(out.String(), "1.50 cgo calls/write; waits: 7 spun, 3 parked") {
		t.Errorf("text result: %s", out.String())
	}
}

func TestSummarize(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Microsecond)
	}
	r := summarize(d)
	if r.Count != 100 || r.MinUs != 1 || r.P50Us != 50 || r.P90Us != 90 || r.P99Us != 99 || r.MaxUs != 100 || r.MeanUs != 50.5 {
		t.Errorf("summarize = %+v", r)
	}
}

// Over TCP loopback the whole perf and ping path runs on any host.
func TestLoopbackTCP(t *testing.T) {
	srv := startCmd(t, "perf", "-s", "127.0.0.1:0", "-tcp")
	addr := srv.addr
	var out, errb bytes.Buffer
	if code := run([]string{"perf", "-c", addr, "-tcp", "-n", "3000000", "-size", "1000", "--json", "-i", "1ms"}, &out, &errb); code != 0 {
		t.Fatalf("perf exit %d: %s", code, errb.String())
	}
	var pr perfjson.PerfResult
	if err := json.Unmarshal(out.Bytes(), &pr); err != nil || pr.Bytes != 3000000 || pr.Writes != 3000 || pr.MBps <= 0 {
		t.Fatalf("perf result %s: %+v, %v", out.String(), pr, err)
	}
	out.Reset()
	if code := run([]string{"ping", addr, "-tcp", "-c", "20", "-warmup", "2", "-size", "100", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("ping exit %d: %s", code, errb.String())
	}
	var pg perfjson.PingResult
	if err := json.Unmarshal(out.Bytes(), &pg); err != nil || pg.Count != 20 || pg.P50Us <= 0 || pg.P99Us < pg.P50Us {
		t.Fatalf("ping result %s: %+v, %v", out.String(), pg, err)
	}
	if pg.CgoPerTrip != nil || pg.SpinsPerTrip != nil || pg.ParksPerTrip != nil {
		t.Errorf("ping over TCP reports rdma costs: %s", out.String())
	}
	// Locks are the process's, over any transport, in a build that counts them.
	if (pg.LocksPerTrip != nil) != lockcount.Enabled {
		t.Errorf("ping over TCP with lockcount.Enabled=%v: %s", lockcount.Enabled, out.String())
	}
}

// Over rdma a round trip that never parked says so: 0 is a figure, not a
// missing one.
func TestPingJSONKeepsZeroCounts(t *testing.T) {
	b, err := json.Marshal(perfjson.PingResult{Transport: "rdma", CgoPerTrip: ptr(1.5), SpinsPerTrip: ptr(0.0), ParksPerTrip: ptr(0.0)})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"cgo_per_round_trip":1.5`, `"spins_per_round_trip":0`, `"parks_per_round_trip":0`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("%s lacks %s", b, key)
		}
	}
}

// With --json the server's standard output is JSON alone, one object per
// client, so that it can be piped to a parser; the banner goes to stderr.
func TestServerJSONOutputIsJSONOnly(t *testing.T) {
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"perf", "-s", "127.0.0.1:0", "-tcp", "-once", "--json"}, outW, errW)
		outW.Close()
		errW.Close()
	}()
	// Both streams are read whole; the banner may come on either.
	type stream struct {
		lines []string
		addr  chan string
	}
	read := func(r io.Reader, s *stream, finished chan<- struct{}) {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			s.lines = append(s.lines, sc.Text())
			if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok {
				addr, _, _ := strings.Cut(rest, " ")
				s.addr <- addr
			}
		}
		close(finished)
	}
	addrs := make(chan string, 2)
	stdout, stderr := &stream{addr: addrs}, &stream{addr: addrs}
	outDone, errDone := make(chan struct{}), make(chan struct{})
	go read(outR, stdout, outDone)
	go read(errR, stderr, errDone)
	addr := <-addrs
	var cout, cerr bytes.Buffer
	if code := run([]string{"perf", "-c", addr, "-tcp", "-n", "100000", "-size", "1000", "--json", "-q"}, &cout, &cerr); code != 0 {
		t.Fatalf("perf exit %d: %s", code, cerr.String())
	}
	if code := <-done; code != 0 {
		t.Fatalf("server exit %d", code)
	}
	<-outDone
	<-errDone
	if len(stdout.lines) != 1 {
		t.Fatalf("server stdout has %d lines, want its one result: %q", len(stdout.lines), stdout.lines)
	}
	var sr ServerResult
	if err := json.Unmarshal([]byte(stdout.lines[0]), &sr); err != nil || sr.Bytes != 100000 {
		t.Fatalf("server stdout %q: %+v, %v", stdout.lines[0], sr, err)
	}
	if !strings.Contains(strings.Join(stderr.lines, "\n"), "listening on") {
		t.Errorf("no banner on the server's stderr: %q", stderr.lines)
	}
}

func TestRefusedTCP(t *testing.T) {
	srv := startCmd(t, "perf", "-s", "127.0.0.1:0", "-tcp")
	addr := srv.addr
	srv.stop() // nothing listens there now
	var out, errb bytes.Buffer
	if code := run([]string{"ping", addr, "-tcp"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "refused") {
		t.Fatalf("ping to a closed port: exit %d, stderr %q; want 1 and a refusal", code, errb.String())
	}
}

func TestNoDevice(t *testing.T) {
	if _, err := verbs.Devices(); !errors.Is(err, verbs.ErrNoDevice) && !errors.Is(err, verbs.ErrNotSupported) {
		t.Skipf("this machine has RDMA devices (%v)", err)
	}
	for _, args := range [][]string{{"devices"}, {"perf", "-s", ":0"}, {"ping", "10.77.0.2"}, {"perf", "-c", "10.77.0.2", "-q"}} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		msg := errb.String()
		if code != 1 || !(strings.Contains(msg, "no RDMA device") || strings.Contains(msg, "no RDMA support")) {
			t.Errorf("rnet %q without a device: exit %d, stderr %q", args, code, msg)
		}
	}
}

func TestRDMAConfigBusyPoll(t *testing.T) {
	t.Setenv("RNET_BUSY_POLL", "")
	if c := rdmaConfig(); c != nil {
		t.Errorf("no RNET_BUSY_POLL: Config %+v, want nil (the defaults)", c)
	}
	t.Setenv("RNET_BUSY_POLL", "200us")
	if c := rdmaConfig(); c == nil || c.BusyPoll != 200*time.Microsecond {
		t.Errorf("RNET_BUSY_POLL=200us: Config %+v", c)
	}
	t.Setenv("RNET_BUSY_POLL", "soon")
	if c := rdmaConfig(); c != nil {
		t.Errorf("a bad RNET_BUSY_POLL must be ignored, got %+v", c)
	}
}

// TestTCPDialFromZonedAddress: -tcp -from keeps a link-local address's zone,
// as the RDMA path does (without it, bind fails with EINVAL).
func TestTCPDialFromZonedAddress(t *testing.T) {
	var from netip.Addr
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
				from = p.Addr().WithZone(ifc.Name)
			}
		}
	}
	if !from.IsValid() {
		t.Skip("no interface with an IPv6 link-local address")
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(from, 0).String())
	if err != nil {
		t.Skipf("cannot listen on %v: %v", from, err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := dial(true, false, ln.Addr().String(), from.String(), "", nil)
	if err != nil {
		t.Fatalf("dial -tcp -from %v: %v", from, err)
	}
	c.Close()
}

// TestFallbackWithoutDevice: on a machine without RDMA, -fallback serves
// and dials over TCP, and the results say which transport ran and why.
func TestFallbackWithoutDevice(t *testing.T) {
	if _, err := verbs.Devices(); !errors.Is(err, verbs.ErrNoDevice) && !errors.Is(err, verbs.ErrNotSupported) {
		t.Skipf("this machine has RDMA devices (%v)", err)
	}
	srv := startCmd(t, "perf", "-s", "127.0.0.1:0", "-fallback")
	var out, errb bytes.Buffer
	if code := run([]string{"perf", "-c", srv.addr, "-fallback", "-n", "100000", "-size", "1000", "--json", "-q"}, &out, &errb); code != 0 {
		t.Fatalf("perf exit %d: %s", code, errb.String())
	}
	var pr perfjson.PerfResult
	if err := json.Unmarshal(out.Bytes(), &pr); err != nil || pr.Transport != "tcp" || pr.Fallback != rnet.FallbackNoDevice.String() {
		t.Fatalf("perf -fallback result %s: %+v, %v; want transport tcp, fallback %q", out.String(), pr, err, rnet.FallbackNoDevice)
	}
	out.Reset()
	if code := run([]string{"ping", srv.addr, "-fallback", "-c", "5", "-warmup", "1"}, &out, &errb); code != 0 {
		t.Fatalf("ping exit %d: %s", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), "tcp (fallback: no RDMA device) ") {
		t.Errorf("ping -fallback printed %q, want the transport and the reason first", out.String())
	}
}

// TestFallbackBannerIsTruthful: perf -s -fallback on a machine without
// RDMA says in its one banner line that it listens over TCP alone, and why,
// and nothing else about listening on stderr.
func TestFallbackBannerIsTruthful(t *testing.T) {
	if _, err := verbs.Devices(); !errors.Is(err, verbs.ErrNoDevice) && !errors.Is(err, verbs.ErrNotSupported) {
		t.Skipf("this machine has RDMA devices (%v)", err)
	}
	outR, outW := io.Pipe()
	var serverErr bytes.Buffer // written by the server alone, read once it has returned
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"perf", "-s", "127.0.0.1:0", "-fallback", "-once"}, outW, &serverErr)
		outW.Close()
	}()
	sc := bufio.NewScanner(outR)
	if !sc.Scan() {
		t.Fatalf("no banner: %v", sc.Err())
	}
	banner := sc.Text()
	drained := make(chan struct{})
	go func() {
		for sc.Scan() {
		}
		close(drained)
	}()
	_, rest, ok := strings.Cut(banner, "listening on ")
	addr, over, _ := strings.Cut(rest, " ")
	if !ok || !strings.HasPrefix(over, "(tcp alone; rdma cannot listen: ") || !strings.Contains(over, "no RDMA") {
		t.Errorf("banner %q: want it to say tcp alone and why", banner)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"perf", "-c", addr, "-fallback", "-n", "1000", "-q"}, &out, &errb); code != 0 {
		t.Fatalf("perf -c %s -fallback: exit %d: %s", addr, code, errb.String())
	}
	if code := <-done; code != 0 {
		t.Fatalf("server exit %d: %s", code, serverErr.String())
	}
	<-drained
	if strings.Contains(serverErr.String(), "listening") {
		t.Errorf("server's stderr speaks of listening too: %q", serverErr.String())
	}
}
