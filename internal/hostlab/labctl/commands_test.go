package main

import (
	"flag"
	"io"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/hostlab"
)

func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		line string
		want command
	}{
		{"", command{}},
		{"   # a comment", command{}},
		{"a rping -c -a $RNET_PEER_ADDR0 -C 5", command{op: "run", host: "a", text: "rping -c -a $RNET_PEER_ADDR0 -C 5"}},
		{"  b   echo 'x  y' | wc -c ", command{op: "run", host: "b", text: "echo 'x  y' | wc -c"}},
		{"wait", command{op: "wait"}},
		{"wait b", command{op: "wait", host: "b"}},
		{"wait 30s", command{op: "wait", dur: 30 * time.Second}},
		{"wait a 2m", command{op: "wait", host: "a", dur: 2 * time.Minute}},
		{"wait b12", command{op: "wait", host: "b", job: "b12"}},
		{"wait 1s a3", command{op: "wait", host: "a", job: "a3", dur: time.Second}},
		{"expect b listening on", command{op: "expect", host: "b", text: "listening on"}},
		{"kill a", command{op: "kill", host: "a", sig: syscall.SIGTERM}},
		{"kill b INT", command{op: "kill", host: "b", sig: syscall.SIGINT}},
		{"kill b sigkill", command{op: "kill", host: "b", sig: syscall.SIGKILL}},
		{"kill b 9", command{op: "kill", host: "b", sig: syscall.SIGKILL}},
		{"kill a2 HUP", command{op: "kill", host: "a", job: "a2", sig: syscall.SIGHUP}},
		{"sleep 500ms", command{op: "sleep", dur: 500 * time.Millisecond}},
		{"cut 1", command{op: "cut", wire: 1}},
		{"restore 0", command{op: "restore", wire: 0}},
		{"cutroce 1", command{op: "cutroce", wire: 1}},
		{"delay 1 20ms", command{op: "delay", wire: 1, dur: 20 * time.Millisecond}},
		{"delay 0 0", command{op: "delay"}},
		{"loss 0 0.01", command{op: "loss", frac: 0.01}},
		{"counts", command{op: "counts"}},
		{"counts 1 0", command{op: "counts", wires: []int{1, 0}}},
		{"linkdown b 1", command{op: "linkdown", host: "b", wire: 1}},
		{"linkup a 0", command{op: "linkup", host: "a"}},
		{"poweroff b", command{op: "poweroff", host: "b"}},
		{"freeze a", command{op: "freeze", host: "a"}},
		{"thaw a", command{op: "thaw", host: "a"}},
		{"reboot b", command{op: "reboot", host: "b"}},
		{"help", command{op: "help"}},
		{"quit", command{op: "quit"}},
	} {
		got, err := parseCommand(tc.line, 2)
		if err != nil {
			t.Errorf("parseCommand(%q): %v", tc.line, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseCommand(%q) = %+v, want %+v", tc.line, got, tc.want)
		}
	}
}

func TestParseCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		line, want string // want: a part of the error
	}{
		{"a", "no command"},
		{"c ls", `unknown command "c"`},
		{"A ls", `unknown command "A"`},
		{"cut", "want WIRE"},
		{"cut 2", "wire 2, but the lab has 2"},
		{"cut -1", `wire "-1"`},
		{"cut x", `wire "x"`},
		{"restore 0 1", "want WIRE"},
		{"delay 0", "want WIRE DURATION"},
		{"delay 0 20", `duration "20"`},
		{"delay 0 -1s", `duration "-1s"`},
		{"loss 0 2", "want 0 to 1"},
		{"loss 0 -0.1", "want 0 to 1"},
		{"loss 0 lots", "want 0 to 1"},
		{"counts 3", "wire 3"},
		{"linkdown c 0", `host "c"`},
		{"linkdown a", "want HOST WIRE"},
		{"linkup a 5", "wire 5"},
		{"poweroff", "want HOST"},
		{"poweroff a b", "want HOST"},
		{"freeze 0", `host "0"`},
		{"reboot c", `host "c"`},
		{"wait c", `"c" is neither a host`},
		{"wait -1s", `"-1s" is neither`},
		{"wait a0", `"a0" is neither`},
		{"wait c1", `"c1" is neither`},
		{"wait b1x", `"b1x" is neither`},
		{"wait a b 1s", "want [HOST] [DURATION]"},
		{"expect a", "want HOST TEXT"},
		{"expect z text", `host "z"`},
		{"kill", "want HOST|JOB [SIGNAL]"},
		{"kill c", `"c" is neither a host`},
		{"kill a-1", `"a-1" is neither a host`},
		{"kill a NOSUCH", `signal "NOSUCH"`},
		{"sleep", "want DURATION"},
		{"sleep soon", `duration "soon"`},
		{"quit now", "takes no arguments"},
	} {
		_, err := parseCommand(tc.line, 2)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseCommand(%q) = %v, want an error containing %q", tc.line, err, tc.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	cfg, verbose, err := parseFlags(nil, io.Discard)
	if err != nil || verbose {
		t.Fatalf("no flags: %v, verbose %v", err, verbose)
	}
	want := hostlab.Config{Devices: []string{"rxe"}, MTU: [2]int{1500, 1500}, MemMiB: 2048, CPUs: 1, BootTimeout: 4 * time.Minute}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("no flags: %+v, want %+v", cfg, want)
	}

	cfg, verbose, err = parseFlags([]string{"-wires", "rxe,siw", "-mtu", "1500,9000", "-direct", "-mem", "1024", "-cpus", "2", "-append", "tsc=reliable clocksource=tsc", "-boot-timeout", "90s", "-v"}, io.Discard)
	if err != nil || !verbose {
		t.Fatalf("all flags: %v, verbose %v", err, verbose)
	}
	want = hostlab.Config{Devices: []string{"rxe", "siw"}, MTU: [2]int{1500, 9000}, Direct: true, MemMiB: 1024, CPUs: 2,
		Append: "tsc=reliable clocksource=tsc", BootTimeout: 90 * time.Second}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("all flags: %+v, want %+v", cfg, want)
	}

	if cfg, _, err = parseFlags([]string{"-mtu", "9000"}, io.Discard); err != nil || cfg.MTU != [2]int{9000, 9000} {
		t.Fatalf("-mtu 9000: %v, MTU %v; want 9000 on both", err, cfg.MTU)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-wires", "rxe,ib"}, `device kind "ib"`},
		{[]string{"-wires", ""}, `device kind ""`},
		{[]string{"-mtu", "1000"}, `"1000"`},
		{[]string{"-mtu", "1500,9001"}, `"9001"`},
		{[]string{"-mtu", "1500,1500,1500"}, "one MTU or two"},
		{[]string{"-mem", "64"}, "at least 256"},
		{[]string{"-cpus", "0"}, "at least 1"},
		{[]string{"-boot-timeout", "0s"}, "positive"},
		{[]string{"cut", "0"}, `unexpected argument "cut"`},
		{[]string{"-nosuch"}, "not defined"},
	} {
		_, _, err := parseFlags(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}

	var usage strings.Builder
	if _, _, err := parseFlags([]string{"-h"}, &usage); err != flag.ErrHelp {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"-wires", "-mtu", "-direct", "-mem", "-append", "poweroff HOST", "flock /tmp/rnet-lab.lock"} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("usage text lacks %q:\n%s", want, usage.String())
		}
	}
}
