package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startExecServer runs an exec server on a loopback port for the test and
// returns its address.
func startExecServer(t *testing.T) string {
	t.Helper()
	addrs := make(chan string, 1)
	errs := make(chan error, 1)
	go func() { errs <- serveExec("127.0.0.1:0", func(a net.Addr) { addrs <- a.String() }) }()
	select {
	case a := <-addrs:
		return a
	case err := <-errs:
		t.Fatal(err)
	}
	return ""
}

// TestExecOnRunsRemotely: the runner gets the command's output, stdout and
// stderr, with its NAME=value entries in the command's environment, and
// its exit code, including a signal's.
func TestExecOnRunsRemotely(t *testing.T) {
	addr := startExecServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	code, err := execOn(ctx, addr, []string{"GREETING=it's here"}, []string{"sh", "-c", `echo "$GREETING"; echo oops >&2; exit 7`}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if code != 7 || out.String() != "it's here\noops\n" {
		t.Fatalf("exit %d, output %q; want 7 and %q", code, out.String(), "it's here\noops\n")
	}
	out.Reset()
	code, err = execOn(ctx, addr, nil, []string{"sh", "-c", "kill -TERM $$"}, &out)
	if err != nil || code != 128+15 {
		t.Fatalf("a command killed by SIGTERM: exit %d, %v; want %d", code, err, 128+15)
	}
	code, err = execOn(ctx, addr, nil, []string{filepath.Join(t.TempDir(), "missing")}, &out)
	if err != nil || code != 127 || !strings.Contains(out.String(), "missing") {
		t.Fatalf("a command that cannot start: exit %d, %v, output %q; want 127 and the error", code, err, out.String())
	}
}

// TestExecOnKillsWhenRunnerGoes: when the runner's connection closes (its
// process was killed, or its context ended), the command is killed, not
// left running on the other host.
func TestExecOnKillsWhenRunnerGoes(t *testing.T) {
	addr := startExecServer(t)
	// The command holds a FIFO's write end open: its reader sees the end
	// of it when the command, and everything it started, is gone.
	fifo := filepath.Join(t.TempDir(), "alive")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := execOn(ctx, addr, nil, []string{"sh", "-c", "exec 3>" + fifo + "; sleep 600"}, io.Discard)
		done <- err
	}()
	alive, err := os.Open(fifo) // returns once the command has opened its end
	if err != nil {
		t.Fatal(err)
	}
	defer alive.Close()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("execOn returned no error when its context ended")
	}
	if _, err := io.ReadAll(alive); err != nil {
		t.Fatal(err)
	}
}

// TestExecServerRejectsBadRequests: a request that is not a command, or one
// too long, gets a clear message and exit code 126, and the server keeps
// serving.
func TestExecServerRejectsBadRequests(t *testing.T) {
	addr := startExecServer(t)
	for _, req := range []string{"not json\n", "{\"argv\":[]}\n", strings.Repeat("x", maxExecRequest+10) + "\n"} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		go conn.Write([]byte(req)) // the server may answer before reading all of a long one
		var frames bytes.Buffer
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		frames.ReadFrom(conn)
		conn.Close()
		kinds, payloads := splitFrames(t, frames.Bytes())
		if !slices.Equal(kinds, []byte{frameOutput, frameExit}) || !strings.Contains(payloads[0], "bad request") || payloads[1] != "126" {
			t.Fatalf("request %.20q: frames %q %q; want a bad-request message and exit 126", req, kinds, payloads)
		}
	}
	var out bytes.Buffer
	if code, err := execOn(context.Background(), addr, nil, []string{"true"}, &out); err != nil || code != 0 {
		t.Fatalf("after bad requests: exit %d, %v", code, err)
	}
}

func splitFrames(t *testing.T, b []byte) (kinds []byte, payloads []string) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("a truncated frame header: %q", b)
		}
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+n {
			t.Fatalf("a truncated frame: %q", b)
		}
		kinds, payloads = append(kinds, b[0]), append(payloads, string(b[5:5+n]))
		b = b[5+n:]
	}
	return kinds, payloads
}

// TestServerCommandThroughExec: with -server-exec, a server's command is
// that command's arguments, after rnet's Config variables of this
// environment and the server's own env; without it, it is unchanged.
func TestServerCommandThroughExec(t *testing.T) {
	t.Setenv("RNET_BUFFER_SIZE", "1048576")
	t.Setenv("RNET_ACK_TIMEOUT", "")
	os.Unsetenv("RNET_ACK_TIMEOUT")
	t.Setenv("RNET_HOST", "a") // the lab's, not rnet's Config: stays here
	c := &config{}
	env, argv := serverCommand(c, []string{"RNET_BUSY_POLL=1m"}, []string{"rnet", "perf", "-s", "10.80.0.2:1"})
	if !slices.Equal(env, []string{"RNET_BUSY_POLL=1m"}) || !slices.Equal(argv, []string{"rnet", "perf", "-s", "10.80.0.2:1"}) {
		t.Fatalf("without -server-exec: %q %q", env, argv)
	}
	c.serverExec = []string{"rnet-benchreport", "-exec-on", "10.80.0.2:18099"}
	env, argv = serverCommand(c, []string{"RNET_BUSY_POLL=1m"}, []string{"rnet", "perf", "-s", "10.80.0.2:1"})
	want := []string{"rnet-benchreport", "-exec-on", "10.80.0.2:18099", "RNET_BUFFER_SIZE=1048576", "RNET_BUSY_POLL=1m", "rnet", "perf", "-s", "10.80.0.2:1"}
	if len(env) != 0 || !slices.Equal(argv, want) {
		t.Fatalf("with -server-exec: env %q, argv %q; want none and %q", env, argv, want)
	}
	// The runner takes the leading NAME=value entries as the environment.
	for arg, want := range map[string]bool{"RNET_BUSY_POLL=1m": true, "_X1=": true, "1X=a": false, "-s=x": false, "perf": false, "a/b=c": false} {
		if isEnvEntry(arg) != want {
			t.Errorf("isEnvEntry(%q) = %v; want %v", arg, !want, want)
		}
	}
}

// TestMain lets this test binary be the runner of -server-exec: with
// BENCHREPORT_TEST_RUNNER=1 its arguments are -exec-on's.
func TestMain(m *testing.M) {
	if os.Getenv("BENCHREPORT_TEST_RUNNER") == "1" {
		os.Exit(execOnMain(os.Args[1], os.Args[2:]))
	}
	os.Exit(m.Run())
}

// TestServerRunsThroughExec: with -server-exec, a measurement's server runs
// through the exec server (in a process group of its own, as the exec
// server starts it) with its environment, its client runs here, and the
// client's TCP segments are counted.
func TestServerRunsThroughExec(t *testing.T) {
	addr := startExecServer(t)
	t.Setenv("BENCHREPORT_TEST_RUNNER", "1")
	seen := filepath.Join(t.TempDir(), "server")
	rnetCmd := filepath.Join(t.TempDir(), "rnet")
	script := "#!/bin/sh\ncase \"$1\" in\n" +
		`perf) echo "pid $$ pgid $(cut -d' ' -f5 /proc/$$/stat) poll $RNET_BUSY_POLL" > ` + seen + `; echo "listening on $3" ;;` + "\n" +
		`ping) echo '{"test":"ping","transport":"rdma","count":20,"p50_us":40,"mean_us":45}' ;;` + "\n" +
		"*) exit 2 ;;\nesac\n"
	if err := os.WriteFile(rnetCmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &config{rnet: rnetCmd, server: "10.80.0.2", client: "10.80.0.1", scale: 1,
		serverExec: []string{os.Args[0], addr}, clientTCPSegments: -1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := rnetPing(false, "RNET_BUSY_POLL=1m")(ctx, c, 1, 64)
	if err != nil || got[Latency] != 45 {
		t.Fatalf("ping through the exec server: %v, %v", got, err)
	}
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatalf("the server did not run: %v", err)
	}
	var pid, pgid int
	var poll string
	if _, err := fmt.Sscanf(string(b), "pid %d pgid %d poll %s", &pid, &pgid, &poll); err != nil || pid != pgid || poll != "1m" {
		t.Fatalf("the server saw %q (%v); want a process group of its own (the exec server's) and RNET_BUSY_POLL=1m", b, err)
	}
	if c.clientTCPSegments < 0 || math.IsNaN(c.clientTCPSegments) {
		t.Fatalf("the client's TCP segments were not counted: %v", c.clientTCPSegments)
	}
}
