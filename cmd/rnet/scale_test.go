package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestParseMeminfo(t *testing.T) {
	in := `MemTotal:        4009148 kB
MemFree:         3916444 kB
MemAvailable:    3815576 kB
Slab:              22236 kB
SUnreclaim:        11908 kB
PageTables:          424 kB
VmallocUsed:        9880 kB
HugePages_Total:       0
`
	got, err := parseMeminfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := memInfo{MemAvailable: 3815576 << 10, Slab: 22236 << 10, VmallocUsed: 9880 << 10, PageTables: 424 << 10}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"MemAvailable: 12 kB\n", "MemAvailable: x kB\nSlab: 1 kB\nVmallocUsed: 1 kB\nPageTables: 1 kB\n", "Slab: 12 MB\n"} {
		if _, err := parseMeminfo(strings.NewReader(bad)); err == nil {
			t.Errorf("parseMeminfo(%q) took it", bad)
		}
	}
}

func TestParseStatus(t *testing.T) {
	in := "Name:\trnet\nVmPin:\t  270336 kB\nVmRSS:\t  123456 kB\nRssAnon:\t  1 kB\nThreads:\t12\n"
	got, err := parseStatus(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := (procStatus{Threads: 12, RSSBytes: 123456 << 10, PinnedBytes: 270336 << 10}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := parseStatus(strings.NewReader("Name:\trnet\nThreads:\t12\n")); err == nil {
		t.Error("a status without VmRSS was taken")
	}
	if runtime.GOOS == "linux" {
		st, err := readStatus()
		if err != nil || st.Threads < 1 || st.RSSBytes <= 0 {
			t.Errorf("this process's status: %+v, %v", st, err)
		}
	}
}

// The objects as the lab's rdma tool (iproute2 6.1) prints them with -j:
// kernel-owned ones carry no pid, others their creating thread's id.
func TestParseRDMAResources(t *testing.T) {
	mr := `[{"ifindex":0,"ifname":"rxe0","mrn":0,"rkey":"0","lkey":"21b","mrlen":135168,"pdn":4,"pid":201,"comm":"rnet"},` +
		`{"ifindex":0,"ifname":"rxe0","mrn":1,"rkey":"35f","lkey":"35f","mrlen":131072,"pdn":4,"pid":201,"comm":"rnet"},` +
		`{"ifindex":0,"ifname":"rxe0","mrn":2,"rkey":"4eb","lkey":"4eb","mrlen":4096,"pdn":4,"pid":202,"comm":"rnet"},` +
		`{"ifindex":1,"ifname":"rxe1","mrn":0,"rkey":"0","lkey":"26e","mrlen":135168,"pdn":4,"pid":190,"comm":"rnet"}]` + "\n"
	all, n, sum, err := parseRDMAResources([]byte(mr), map[int]bool{201: true, 202: true})
	if err != nil || all != 4 || n != 3 || sum != 135168+131072+4096 {
		t.Errorf("mr: %d objects, %d of pid 201 with %d bytes, %v; want 4, 3 (of threads 201 and 202), %d", all, n, sum, err, 135168+131072+4096)
	}
	cq := `[{"ifindex":0,"ifname":"rxe0","cqn":0,"cqe":1023,"users":2,"poll-ctx":"WORKQUEUE","adaptive-moderation":false,"comm":"ib_core"},` +
		`{"ifindex":0,"ifname":"rxe0","cqn":3,"cqe":1023,"users":2,"adaptive-moderation":false,"ctxn":2,"pid":201,"comm":"rnet"}]`
	if all, n, sum, err := parseRDMAResources([]byte(cq), map[int]bool{201: true}); err != nil || all != 2 || n != 1 || sum != 0 {
		t.Errorf("cq: %d objects, %d of pid 201 with %d bytes, %v; want 2, 1, 0", all, n, sum, err)
	}
	if all, n, _, err := parseRDMAResources([]byte("[]\n"), map[int]bool{201: true}); err != nil || all != 0 || n != 0 {
		t.Errorf("no objects: %d, %d, %v", all, n, err)
	}
	if _, _, _, err := parseRDMAResources([]byte("dev rxe0 mrn 0 mrlen 4096 pid 201"), map[int]bool{201: true}); err == nil {
		t.Error("text output was taken for JSON")
	}
}

func TestEchoMessage(t *testing.T) {
	m := echoMessage(7)
	if err := checkEchoMessage(m); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(m, echoMessage(8)) {
		t.Error("two connections' messages are the same")
	}
	m[20] ^= 1
	if err := checkEchoMessage(m); err == nil {
		t.Error("a damaged message passed its checksum")
	}
}

func TestScaleLines(t *testing.T) {
	r := ScaleResult{Conns: 1000, OK: 999, OpenSecs: 12.34, BusyMBps: 45.67}
	r.fill(serverFigures{
		Conns: 999, CQs: 999, FDs: 4000, Status: procStatus{Threads: 9, RSSBytes: 999 << 20, PinnedBytes: 999 * 270336}, Ends: 1998,
		MemBefore: memInfo{MemAvailable: 4 << 30, Slab: 1 << 20, VmallocUsed: 2 << 20, PageTables: 3 << 20},
		MemAfter:  memInfo{MemAvailable: 4<<30 - 1998*1000, Slab: 1<<20 + 1998*10, VmallocUsed: 2<<20 + 1998*20, PageTables: 3<<20 + 1998*30},
	})
	want := "SCALE conns=1000 ok=999 pinned_bytes_per_conn=270336 fds_per_conn=4.00 threads=9 cqs=999 open_secs=12.3 busy_MBps=45.7"
	if got := r.scaleLine(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	wantMem := "SCALE-MEM ends=1998 mem_per_end=1000 slab_per_end=10 vmalloc_per_end=20 page_tables_per_end=30 server_rss_per_conn=1048576 close_secs=0.0"
	if got := r.memLine(); got != wantMem {
		t.Errorf("got  %s\nwant %s", got, wantMem)
	}
}

func TestControlAddr(t *testing.T) {
	for in, want := range map[string]string{"10.77.0.2:7471": "10.77.0.2:7472", "[fd77::2]:9000": "[fd77::2]:9001"} {
		if got, err := controlAddr(in); err != nil || got != want {
			t.Errorf("controlAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"10.77.0.2:65535", "10.77.0.2:0", "10.77.0.2"} {
		if got, err := controlAddr(bad); err == nil {
			t.Errorf("controlAddr(%q) = %q, want an error", bad, got)
		}
	}
}

// TestScaleOverTCP runs server and client over TCP loopback, which needs no
// device: every step of the exchange, and the SCALE line's form.
func TestScaleOverTCP(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctlLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var serverErrs bytes.Buffer
	served := make(chan error, 1)
	go func() { served <- newScaleServer(&serverErrs, true).run(ln, ctlLn) }()
	o := scaleOpts{addr: ln.Addr().String(), ctlAddr: ctlLn.Addr().String(), conns: 50, parallel: 4, busy: 5, busyBytes: 300 << 10, tcp: true}
	var out bytes.Buffer
	if err := runScaleClient(o, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("server: %v (stderr: %s)", err, serverErrs.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want the SCALE and SCALE-MEM lines, got %q", out.String())
	}
	re := regexp.MustCompile(`^SCALE conns=50 ok=50 pinned_bytes_per_conn=0 fds_per_conn=[0-9.]+ threads=[1-9][0-9]* cqs=0 open_secs=[0-9.]+ busy_MBps=[0-9.]+$`)
	if !re.MatchString(lines[0]) {
		t.Errorf("SCALE line %q does not match %s", lines[0], re)
	}
	if !strings.HasPrefix(lines[1], "SCALE-MEM ends=100 ") {
		t.Errorf("memory line %q: want ends=100 (both ends on this machine)", lines[1])
	}
	if strings.Contains(serverErrs.String(), "connection from") {
		t.Errorf("a connection failed on the server: %s", serverErrs.String())
	}

	// --json: the same figures as one object.
	ln, _ = net.Listen("tcp", "127.0.0.1:0")
	ctlLn, _ = net.Listen("tcp", "127.0.0.1:0")
	go func() { served <- newScaleServer(io.Discard, true).run(ln, ctlLn) }()
	o.addr, o.ctlAddr, o.json, o.conns = ln.Addr().String(), ctlLn.Addr().String(), true, 10
	out.Reset()
	if err := runScaleClient(o, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	<-served
	var r ScaleResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if r.OK != 10 || r.Server.Conns != 10 || r.BusyConns != 5 || r.BusyMBps <= 0 {
		t.Errorf("JSON result %+v", r)
	}
}

// TestScaleOpenFailureNamesConnection: when a connection's echo comes back
// damaged, the client stops opening and its error names the connection and
// the step.
func TestScaleOpenFailureNamesConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var m [scaleMsgLen]byte
				io.ReadFull(c, m[:])
				m[10] ^= 0xff // a damaged echo
				c.Write(m[:])
			}()
		}
	}()
	o := scaleOpts{addr: ln.Addr().String(), conns: 3, parallel: 1, tcp: true}
	conns, err := openScaleConns(o, io.Discard)
	closeAll(nonNil(conns), 1)
	if err == nil || !strings.Contains(err.Error(), "connection 0 of 3, echo check") {
		t.Errorf("error %v, want it to name connection 0 and the echo check", err)
	}
}

// TestScaleReleaseCheck: the server's release check passes once what it
// opened is closed, and names what is left over otherwise.
func TestScaleReleaseCheck(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	base, err := takeHoldings(true)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	now, err := takeHoldings(true)
	if err != nil {
		t.Fatal(err)
	}
	if now.releasedFrom(base) {
		t.Errorf("an open listener: %s against %s counts as released", now, base)
	}
	ln.Close()
	var out bytes.Buffer
	if err := checkReleased(base, true, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "SCALE-RELEASE released=true fds=") {
		t.Errorf("release line %q", out.String())
	}
}

// TestScaleControlIsBounded: the scale server reads the control connection
// a line at a time up to a size, and waits for a request within a
// deadline; an oversized, malformed, silent or half-sent request ends the
// run with an error that says which.
func TestScaleControlIsBounded(t *testing.T) {
	for _, c := range []struct {
		name        string
		send        []byte // then the connection stays open
		first, rest time.Duration
		want        string
	}{
		{"oversized", append([]byte(`{"op":"`), bytes.Repeat([]byte("a"), 2*maxControlMessage)...), time.Hour, time.Hour, "a control message longer than 65536 bytes"},
		{"malformed", []byte("nope\n"), time.Hour, time.Hour, `a bad control message "nope\n"`},
		{"silent", nil, 10 * time.Millisecond, time.Hour, "no request within 10ms of connecting"},
		{"half sent", []byte(`{"op":`), time.Hour, 10 * time.Millisecond, "a control message not whole within 10ms of its first byte"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctlLn, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			s := newScaleServer(io.Discard, true)
			s.firstRequestWait, s.requestWait = c.first, c.rest
			served := make(chan error, 1)
			go func() { served <- s.run(ln, ctlLn) }()
			ctl, err := net.Dial("tcp", ctlLn.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer ctl.Close()
			go ctl.Write(c.send) // the server may stop reading part way
			select {
			case err := <-served:
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("server: %v; want an error with %q", err, c.want)
				}
			case <-time.After(failAfter):
				t.Fatalf("the server still reads the control connection after %v", failAfter)
			}
		})
	}
}
