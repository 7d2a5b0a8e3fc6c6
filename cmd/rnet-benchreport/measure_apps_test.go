package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// appLine is an appbench result line for a 64 B workload; rnet's counters
// only over rdma.
func appLine(transport, workload string, conc int, p50, callsPerSec, syscalls float64) string {
	rnetCounters := ""
	if transport == "rdma" {
		rnetCounters = `,"rnet":{"CQPolls":6,"Parks":2,"Spins":0}`
	}
	return fmt.Sprintf(`{"test":"app","transport":%q,"workload":%q,"size":64,"concurrency":%d,"calls":300,"seconds":1.5,`+
		`"calls_per_s":%g,"MBps":0.02,"p50_us":%g,"p99_us":%g,`+
		`"client":{"wakeups":9,"context_switches":4,"syscalls":%g%s},"server":{"wakeups":7,"context_switches":3,"syscalls":%g,"syscalls_all":20,"syscalls_by_name":{"futex":6,"ioctl":0}}}`,
		transport, workload, conc, callsPerSec, p50, 2*p50, syscalls, rnetCounters, syscalls+1)
}

// fakeAppbench writes a shell script standing in for appbench: with -s it
// says it listens and exits, with -c it prints out, over -tcp tcpOut.
func fakeAppbench(t *testing.T, out, tcpOut string) string {
	t.Helper()
	script := "#!/bin/sh\ncase \"$*\" in\n" +
		"-s*) echo \"appbench: listening on $2\" ;;\n" +
		"*-tcp*) cat <<'EOF'\n" + tcpOut + "\nEOF\n;;\n" +
		"-c*) cat <<'EOF'\n" + out + "\nEOF\n;;\n" +
		"*) exit 2 ;;\nesac\n"
	p := filepath.Join(t.TempDir(), "appbench")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMeasureApps: appbench's lines become Extra series of rnet and TCP,
// per workload, size and figure, both sides' work included; the tables put
// rnet beside TCP with their ratio.
func TestMeasureApps(t *testing.T) {
	rdma := appLine("rdma", "grpc-unary", 1, 200, 5000, 3) + "\n" + appLine("rdma", "http1", 32, 400, 8000, 5)
	tcp := appLine("tcp", "grpc-unary", 1, 800, 1250, 4) + "\n" + appLine("tcp", "http1", 32, 400, 4000, 6)
	c := &config{appbench: fakeAppbench(t, rdma, tcp), server: "10.77.0.2", client: "10.77.0.1", scale: 1}
	r := &Report{Runs: 1}
	series := func(list *[]*Series, transport, kind string, size int) *Series {
		if s := r.find(*list, transport, kind, size); s != nil {
			return s
		}
		s := &Series{Transport: transport, Kind: kind, Size: size}
		*list = append(*list, s)
		return s
	}
	measureApps(r, c, 18000, RNet, series)
	measureApps(r, c, 18002, TCP, series)
	for _, s := range r.Extra {
		if s.Failures > 0 || len(s.Runs) != 1 {
			t.Fatalf("series %+v", s)
		}
		s.Median = s.Runs[0]
	}
	if len(r.Series) != 0 {
		t.Errorf("application figures among the plotted series: %v", r.Series)
	}
	for _, want := range []struct {
		transport, kind string
		v               float64
	}{
		{RNet, "app:grpc-unary-c1:p50", 200}, {TCP, "app:grpc-unary-c1:p50", 800},
		{RNet, "app:http1-c32:calls/s", 8000}, {TCP, "app:http1-c32:p99", 800},
		{RNet, "app:grpc-unary-c1:client/syscalls", 3}, {TCP, "app:http1-c32:server/syscalls", 7},
		{RNet, "app:grpc-unary-c1:server/syscalls-all", 20}, {RNet, "app:http1-c32:client/rnet/CQPolls", 6},
		{TCP, "app:http1-c32:client/wakeups", 9}, {TCP, "app:grpc-unary-c1:server/syscall/futex", 6}, {RNet, "app:http1-c32:server/context-switches", 3},
	} {
		if got := r.work(want.transport, want.kind, 64); got != want.v {
			t.Errorf("%s %s = %v, want %v", want.transport, want.kind, got, want.v)
		}
	}
	if s := r.find(r.Extra, TCP, "app:http1-c32:client/rnet/CQPolls", 64); s != nil {
		t.Errorf("rnet counters over TCP: %+v", s)
	}

	var b strings.Builder
	r.WriteTable(&b)
	out := b.String()
	rows := tableRows(t, out, "Applications")
	if want := []string{"workload", "size", "figure", "rnet", "tcp", "rnet/tcp"}; !slices.Equal(rows[0], want) {
		t.Errorf("applications header %q, want %q", rows[0], want)
	}
	for _, want := range [][]string{
		{"grpc-unary-c1", "64", "p50", "200", "800", "0.25x"},
		{"http1-c32", "64", "calls/s", "8000", "4000", "2.00x"},
	} {
		if !slices.ContainsFunc(rows, func(row []string) bool { return slices.Equal(row, want) }) {
			t.Errorf("no applications row %q in %q", want, rows)
		}
	}
	rows = tableRows(t, out, "Work per call, applications")
	for _, want := range [][]string{
		{"grpc-unary-c1", "64", "syscalls", "3.00", "4.00", "4.00", "5.00"},
		{"grpc-unary-c1", "64", "syscalls-all", "-", "-", "20.0", "20.0"},
		{"http1-c32", "64", "rnet/CQPolls", "6.00", "-", "-", "-"},
		{"http1-c32", "64", "syscall/futex", "-", "-", "6.00", "6.00"},
		{"http1-c32", "64", "rnet/Parks", "2.00", "-", "-", "-"},
	} {
		if !slices.ContainsFunc(rows, func(row []string) bool { return slices.Equal(row, want) }) {
			t.Errorf("no work row %q in %q", want, rows)
		}
	}
	if strings.Contains(out, "rnet/Spins") || strings.Contains(out, "rnet/BytesSent") || strings.Contains(out, "syscall/ioctl") {
		t.Errorf("work table shows counters that are zero or absent:\n%s", out)
	}
}

// TestMeasureAppsFailure: appbench failing counts as a failed run of the
// applications, reported with the other failures.
func TestMeasureAppsFailure(t *testing.T) {
	c := &config{appbench: fakeAppbench(t, "appbench: grpc-unary/64/c1: body byte 3 of 64 is 0x00", ""), server: "10.77.0.2", client: "10.77.0.1", scale: 1}
	r := &Report{Runs: 1}
	series := func(list *[]*Series, transport, kind string, size int) *Series {
		s := &Series{Transport: transport, Kind: kind, Size: size}
		*list = append(*list, s)
		return s
	}
	measureApps(r, c, 18000, RNet, series)
	if len(r.Extra) != 1 || r.Extra[0].Kind != appsFailed || r.Extra[0].Failures != 1 {
		t.Fatalf("extra %+v, want one failed run", r.Extra)
	}
	var b strings.Builder
	r.WriteTable(&b)
	if !strings.Contains(b.String(), "rnet app:all:calls/s: 1 of 1 runs failed") || strings.Contains(b.String(), "\nApplications") {
		t.Errorf("report of a failed run:\n%s", b.String())
	}
}

func TestParseApps(t *testing.T) {
	list, err := parseApps("noise\n" + appLine("tcp", "http2", 32, 100, 50, 2) + "\n")
	if err != nil || len(list) != 1 || list[0].Workload != "http2" || list[0].Server.SyscallsAll == nil || *list[0].Server.SyscallsAll != 20 {
		t.Errorf("parseApps = %+v, %v", list, err)
	}
	for _, bad := range []string{"", "appbench: refused\n", `{"test":"app","calls":0}`, `{"test":"app","calls":3,"calls_per_s":1`} {
		if _, err := parseApps(bad); err == nil {
			t.Errorf("parseApps(%q) accepted", bad)
		}
	}
}
