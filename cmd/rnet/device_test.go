package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"
	"github.com/rnet-dev/rnet/internal/perfjson"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/rnet"
)

// rnetCmd runs the rnet command (this test binary, see TestMain) and returns
// its stdout, stderr and exit status.
func rnetCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RNET_CMD_AS_MAIN=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func TestRXEDevicesJSON(t *testing.T) {
	p := rdmatest.Require(t)
	out, errs, code := rnetCmd(t, "devices", "--json")
	if code != 0 {
		t.Fatalf("rnet devices --json: exit %d: %s", code, errs)
	}
	var devs []Device
	if err := json.Unmarshal([]byte(out), &devs); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	ips := map[string]string{}
	for _, d := range devs {
		if len(d.Ports) == 0 || d.Transport == "unknown" {
			t.Errorf("device %+v: no ports or transport", d)
		}
		for _, port := range d.Ports {
			if port.State != "ACTIVE" || port.ActiveMTU < 256 {
				t.Errorf("%s port %d: state %s mtu %d", d.Name, port.Port, port.State, port.ActiveMTU)
			}
			for _, g := range port.GIDs {
				if g.IP != "" {
					ips[g.IP] = d.Name + " " + d.Transport + " " + g.Netdev
				}
			}
		}
	}
	for _, a := range []string{p.Server.String(), p.Client.String()} {
		if !strings.Contains(ips[a], "RoCE") || !strings.Contains(ips[a], "rvm") && os.Getenv("RNET_GUEST") == "1" {
			t.Errorf("no RoCE GID with IP %s: %v", a, ips)
		}
	}
	text, _, code := rnetCmd(t, "devices")
	if code != 0 || !strings.Contains(text, p.Server.String()) || !strings.Contains(text, "GID") {
		t.Errorf("rnet devices: exit %d:\n%s", code, text)
	}
}

func TestRXEPerfAndPing(t *testing.T) {
	p := rdmatest.Require(t)
	srv := startCmd(t, "perf", "-s", p.Server.String()+":0")
	out, errs, code := rnetCmd(t, "perf", "-c", srv.addr, "-from", p.Client.String(), "-n", "2000000", "-size", "65536", "--json", "-i", "50ms")
	if code != 0 {
		t.Fatalf("rnet perf -c: exit %d: %s", code, errs)
	}
	var pr perfjson.PerfResult
	if err := json.Unmarshal([]byte(out), &pr); err != nil || pr.Transport != "rdma" || pr.Bytes != 2000000 || pr.MBps <= 0 || pr.Stats == nil || pr.Stats.BytesWritten != 2000000+helloLen {
		t.Fatalf("perf result %q: %+v, %v", out, pr, err)
	}
	if !strings.Contains(errs, "MB/s") {
		t.Logf("no progress line in %q (the run took %.2f s)", errs, pr.Seconds)
	}
	// The server's line for that client says what its Reads cost.
	select {
	case line := <-srv.lines:
		var perRead float64
		_, rest, ok := strings.Cut(line, "; ")
		if !strings.HasPrefix(line, "rdma perf from") || !ok {
			t.Fatalf("server line %q", line)
		}
		if _, err := fmt.Sscanf(rest, "%f cgo calls/read", &perRead); err != nil || perRead <= 0 {
			t.Errorf("server line %q: crossings per read %v, %v", line, perRead, err)
		}
	case <-time.After(time.Minute):
		t.Fatal("no server line after the perf client finished")
	}
	out, errs, code = rnetCmd(t, "ping", srv.addr, "-from", p.Client.String(), "-c", "200", "-warmup", "10", "--json")
	if code != 0 {
		t.Fatalf("rnet ping: exit %d: %s", code, errs)
	}
	var pg perfjson.PingResult
	if err := json.Unmarshal([]byte(out), &pg); err != nil || pg.Count != 200 || pg.Size != 64 || pg.P50Us <= 0 || pg.P99Us < pg.P50Us {
		t.Fatalf("ping result %q: %+v, %v", out, pg, err)
	}
	// Every round trip's Write crosses into C to post. Not every reply is
	// waited for: over rxe the post runs the whole exchange in the system
	// call, and the peer's reply can land while it runs, so that the
	// Write's own poll takes it (about a third of round trips in the lab).
	// But 200 replies never all come that way, and waits must be counted.
	if pg.CgoPerTrip == nil || pg.SpinsPerTrip == nil || pg.ParksPerTrip == nil {
		t.Fatalf("ping result %q: rdma costs missing", out)
	}
	if *pg.SpinsPerTrip+*pg.ParksPerTrip <= 0 || *pg.CgoPerTrip < 1 {
		t.Errorf("ping result %q: no waits counted, or fewer crossings than round trips", out)
	}
	// Built with -tags rnet_lockcount (make bench's rnet-lockcount), the
	// client counts its locks: at least the connection's own in each Write.
	if (pg.LocksPerTrip != nil) != lockcount.Enabled || lockcount.Enabled && *pg.LocksPerTrip < 1 {
		t.Errorf("ping result %q: locks per round trip with lockcount.Enabled=%v", out, lockcount.Enabled)
	}
	// Text forms.
	out, errs, code = rnetCmd(t, "ping", srv.addr, "-from", p.Client.String(), "-c", "20", "-size", "4096")
	if code != 0 || !strings.Contains(out, "p99") || !strings.Contains(out, "parks") {
		t.Fatalf("rnet ping (text): exit %d: %s %s", code, out, errs)
	}
}

func TestRXEErrors(t *testing.T) {
	p := rdmatest.Require(t)
	// A refused peer: a port nobody listens on.
	srv := startCmd(t, "perf", "-s", p.Server.String()+":0")
	addr := srv.addr
	srv.stop()
	_, errs, code := rnetCmd(t, "ping", addr, "-from", p.Client.String())
	if code != 1 || !strings.Contains(errs, "refused") {
		t.Errorf("ping to a closed port: exit %d, stderr %q", code, errs)
	}
	// Addresses that are not on an RDMA interface.
	_, errs, code = rnetCmd(t, "perf", "-s", "127.0.0.1:0")
	if code != 1 || !strings.Contains(errs, "not on an RDMA interface") {
		t.Errorf("listen on loopback: exit %d, stderr %q", code, errs)
	}
	_, errs, code = rnetCmd(t, "ping", addr, "-from", "127.0.0.1")
	if code != 1 || !strings.Contains(errs, "not on an RDMA interface") {
		t.Errorf("dial from loopback: exit %d, stderr %q", code, errs)
	}
	// A usage error stays a usage error on a device host.
	if _, _, code = rnetCmd(t, "ping"); code != 2 {
		t.Errorf("ping without a host: exit %d, want 2", code)
	}
}

// TestRXEScale runs rnet scale's server and client as two processes on the
// lab's pair: every connection echoed, the server's own figures read, the
// busy connections' bytes counted, and everything the server held released
// once it has closed them.
func TestRXEScale(t *testing.T) {
	p := rdmatest.Require(t)
	// Streams side by side in an emulated guest can outlast rxe's short
	// default ACK timeout, which makes rxe fail connections
	// (docs/benchmarks.md); this test is about the command.
	t.Setenv("RNET_ACK_TIMEOUT", "2s")
	// A fixed port: the control connection takes the next one, and
	// nothing else in the guest listens there.
	srv := startCmd(t, "scale", "-s", p.Server.String()+":7571")
	out, errs, code := rnetCmd(t, "scale", "-c", srv.addr, "-from", p.Client.String(),
		"-conns", "40", "-parallel", "8", "-busy", "10", "-busy-bytes", "1000000", "--json")
	if code != 0 {
		t.Fatalf("rnet scale -c: exit %d: %s", code, errs)
	}
	var r ScaleResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if r.Transport != "rdma" || r.OK != 40 || r.Server.Conns != 40 || r.BusyConns != 10 || r.BusyMBps <= 0 {
		t.Errorf("result %+v", r)
	}
	if r.Server.RDMAError != "" || r.Server.CQs < 1 || r.Server.MRs < 1 || r.PinnedBytesPerConn <= 0 || r.Threads < 1 || r.FDsPerConn <= 0 {
		t.Errorf("server figures %+v", r.Server)
	}
	if r.Ends != 80 {
		t.Errorf("%d connection ends on the server's machine, want 80 (both processes in one guest)", r.Ends)
	}
	lines, err := srv.wait()
	release := ""
	for _, line := range lines {
		if strings.HasPrefix(line, "SCALE-RELEASE ") {
			release = line
		}
	}
	if err != nil || !strings.HasPrefix(release, "SCALE-RELEASE released=true ") {
		t.Errorf("rnet scale -s: exit %v, release line %q; want released=true", err, release)
	}
	t.Log(release)
}

// TestRXEPerfParallelAndReverse runs -P 4 and -R over rxe between two
// processes: the streams share -n, the intervals add up, every stream
// reports its own rdma counters, and the server reports the -P test once,
// as its four streams and their sum.
func TestRXEPerfParallelAndReverse(t *testing.T) {
	p := rdmatest.Require(t)
	srv := startCmd(t, "perf", "-s", p.Server.String()+":0")
	out, errs, code := rnetCmd(t, "perf", "-c", srv.addr, "-from", p.Client.String(), "-P", "4", "-n", "4M", "-size", "64K", "--json", "-i", "100ms")
	if code != 0 {
		t.Fatalf("rnet perf -c -P 4: exit %d: %s %s", code, out, errs)
	}
	var r perfjson.PerfResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Transport != "rdma" || r.Parallel != 4 || len(r.Streams) != 4 || r.Bytes != 4<<20 || r.CgoPerWrite <= 0 {
		t.Fatalf("perf -P 4 result %q: %+v, %v", out, r, err)
	}
	for _, s := range r.Streams {
		if s.Bytes != 1<<20 || s.Stats == nil || s.Stats.BytesWritten != 1<<20+helloLen {
			t.Errorf("stream %+v", s)
		}
	}
	checkIntervals(t, r)
	// The server's lines: one per stream, then the sum.
	var lines []string
	for len(lines) < 5 {
		select {
		case line := <-srv.lines:
			lines = append(lines, line)
		case <-time.After(time.Minute):
			t.Fatalf("server lines after the -P client finished: %q", lines)
		}
	}
	for i, line := range lines[:4] {
		if !strings.HasPrefix(line, fmt.Sprintf("[%3d] rdma perf from ", i+1)) || !strings.Contains(line, "1 MiB") {
			t.Errorf("server stream line %q", line)
		}
	}
	if !strings.HasPrefix(lines[4], "[SUM] 4 streams, rdma perf from "+p.Client.String()+":") || !strings.Contains(lines[4], "4 MiB") {
		t.Errorf("server sum line %q", lines[4])
	}

	out, errs, code = rnetCmd(t, "perf", "-c", srv.addr, "-from", p.Client.String(), "-R", "-n", "2M", "--json", "-q")
	if code != 0 {
		t.Fatalf("rnet perf -c -R: exit %d: %s %s", code, out, errs)
	}
	r = perfjson.PerfResult{} // a fresh one: Unmarshal leaves fields the JSON lacks
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Transport != "rdma" || !r.Reverse || r.Bytes != 2<<20 || r.Reads == 0 || r.CgoPerRead <= 0 ||
		r.Stats == nil || r.Stats.BytesRead != 2<<20 {
		t.Fatalf("perf -R result %q: %+v, %v", out, r, err)
	}
	checkIntervals(t, r)
	select {
	case line := <-srv.lines:
		if !strings.HasPrefix(line, "rdma perf -R from ") || !strings.Contains(line, "2 MiB") || !strings.Contains(line, "cgo calls/write") {
			t.Errorf("server -R line %q", line)
		}
	case <-time.After(time.Minute):
		t.Fatal("no server line after the -R client finished")
	}
}

// deviceWith names the device one of whose addresses (as -d finds them)
// is ip.
func deviceWith(t *testing.T, ip netip.Addr) string {
	t.Helper()
	infos, err := verbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range infos {
		addrs, _ := rnet.DeviceAddrs(d.Name)
		if slices.Contains(addrs, ip) {
			return d.Name
		}
	}
	t.Fatalf("no device has the address %v (-d's view of the devices)", ip)
	return ""
}

// TestRXEDeviceByName: -d binds the server and the client to the named
// devices' addresses, over RoCE and (where the lab has it) iWARP, and
// names the devices present when the one asked for is not.
func TestRXEDeviceByName(t *testing.T) {
	p := rdmatest.Require(t)
	server, client := deviceWith(t, p.Server), deviceWith(t, p.Client)
	srv := startCmd(t, "perf", "-s", ":0", "-d", server)
	if host, _, _ := net.SplitHostPort(srv.addr); host != p.Server.String() {
		t.Fatalf("perf -s -d %s listens on %s, want %v", server, srv.addr, p.Server)
	}
	out, errs, code := rnetCmd(t, "perf", "-c", srv.addr, "-d", client, "-n", "1M", "--json", "-q")
	var pr perfjson.PerfResult
	if code != 0 || json.Unmarshal([]byte(out), &pr) != nil || pr.Transport != "rdma" || !strings.HasPrefix(pr.Local, p.Client.String()+":") {
		t.Fatalf("perf -c -d %s: exit %d, %q %s; want rdma from %v", client, code, out, errs, p.Client)
	}
	out, errs, code = rnetCmd(t, "ping", srv.addr, "-d", client, "-c", "20", "-warmup", "2", "--json")
	var pg perfjson.PingResult
	if code != 0 || json.Unmarshal([]byte(out), &pg) != nil || pg.Count != 20 || !strings.HasPrefix(pg.Local, p.Client.String()+":") {
		t.Fatalf("ping -d %s: exit %d, %q %s; want 20 round trips from %v", client, code, out, errs, p.Client)
	}
	out, errs, code = rnetCmd(t, "devices", "-d", server, "--json")
	var devs []Device
	if code != 0 || json.Unmarshal([]byte(out), &devs) != nil || len(devs) != 1 || devs[0].Name != server {
		t.Errorf("devices -d %s: exit %d, %q %s; want that device alone", server, code, out, errs)
	}
	_, errs, code = rnetCmd(t, "ping", srv.addr, "-d", "nosuch0")
	if code != 1 || !strings.Contains(errs, `no RDMA device "nosuch0"`) || !strings.Contains(errs, client) {
		t.Errorf("ping -d nosuch0: exit %d, stderr %q; want 1 and the devices present", code, errs)
	}

	t.Run("iWARP", func(t *testing.T) {
		p := rdmatest.RequireIWARP(t)
		server, client := deviceWith(t, p.Server), deviceWith(t, p.Client)
		srv := startCmd(t, "perf", "-s", ":0", "-d", server, "-once")
		if host, _, _ := net.SplitHostPort(srv.addr); host != p.Server.String() {
			t.Fatalf("perf -s -d %s listens on %s, want %v", server, srv.addr, p.Server)
		}
		out, errs, code := rnetCmd(t, "perf", "-c", srv.addr, "-d", client, "-n", "1M", "--json", "-q")
		var pr perfjson.PerfResult
		if code != 0 || json.Unmarshal([]byte(out), &pr) != nil || pr.Transport != "rdma" || !strings.HasPrefix(pr.Local, p.Client.String()+":") {
			t.Fatalf("perf -c -d %s: exit %d, %q %s; want rdma from %v", client, code, out, errs, p.Client)
		}
	})
}
