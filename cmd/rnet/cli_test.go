package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

// TestHelpOnStdout: every way of asking for help prints it on stdout and
// exits 0, with nothing on stderr.
func TestHelpOnStdout(t *testing.T) {
	for _, c := range []struct {
		args []string
		has  []string
	}{
		{[]string{"help"}, []string{"rnet perf -s [addr] | -c host[:port]", "rnet ping host[:port]", "rnet help [COMMAND]", "rnet version", "powers of 1024"}},
		{[]string{"-h"}, []string{"rnet devices [-d DEVICE]"}},
		{[]string{"--help"}, []string{"rnet scale -s"}},
		{[]string{"-help"}, []string{"rnet ping"}},
		{[]string{"help", "perf"}, []string{"usage: rnet perf -s [addr] | -c host[:port] [flags]", "-P int", "-R\t", "-a\t", "-buffer bytes", "-busy-poll duration", "-ack-timeout", "-n bytes", "-d device", "(default 64K)", "(default 1G)"}},
		{[]string{"perf", "-h"}, []string{"usage: rnet perf", "-size bytes"}},
		{[]string{"perf", "--help"}, []string{"usage: rnet perf", "-max-buffered bytes"}},
		{[]string{"perf", "-c", "h", "-size", "4K", "-h"}, []string{"usage: rnet perf"}},
		{[]string{"help", "ping"}, []string{"usage: rnet ping", "-c int", "-progress duration", "-q\t", "-busy-poll", "-d device"}},
		{[]string{"ping", "-h"}, []string{"usage: rnet ping"}},
		{[]string{"help", "devices"}, []string{"usage: rnet devices", "-json", "-d device"}},
		{[]string{"devices", "--help"}, []string{"usage: rnet devices"}},
		{[]string{"help", "scale"}, []string{"usage: rnet scale", "-conns", "-busy-bytes bytes", "(default 4M)", "-d device"}},
		{[]string{"scale", "-h"}, []string{"usage: rnet scale"}},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != 0 || errb.Len() != 0 {
			t.Errorf("rnet %q: exit %d, stderr %q; want 0 and help on stdout alone", c.args, code, errb.String())
		}
		for _, s := range c.has {
			if !strings.Contains(out.String(), s) {
				t.Errorf("rnet %q lacks %q:\n%s", c.args, s, out.String())
			}
		}
	}
}

// TestUsageErrorIsShort: a mistake on the command line prints what is
// wrong and two lines of usage on stderr, never the whole flag list, and
// exits 2 with nothing on stdout.
func TestUsageErrorIsShort(t *testing.T) {
	for _, c := range []struct {
		args []string
		cmd  string // whose usage, "" for rnet's
		says string
	}{
		{[]string{"perf", "-bogus"}, "perf", "flag provided but not defined: -bogus"},
		{[]string{"perf"}, "perf", "pass -s [addr] to serve or -c host"},
		{[]string{"perf", "-c", "h", "-size", "64iB"}, "perf", `invalid value "64iB" for flag -size: unknown unit "iB"`},
		{[]string{"perf", "-c", "h", "-P", "0"}, "perf", "-P must be in 1..128"},
		{[]string{"perf", "-c", "h", "-d", "rxe0", "-from", "10.0.0.1"}, "perf", "-d and -from exclude each other"},
		{[]string{"ping"}, "ping", "want exactly one host[:port]"},
		{[]string{"ping", "h", "-n", "5"}, "ping", "-c COUNT, as ping(8) does"},
		{[]string{"ping", "h", "-c", "0"}, "ping", "-c and -progress must be positive"},
		{[]string{"scale", "-c", "h", "-busy-bytes", "4Q"}, "scale", `unknown unit "Q"`},
		{[]string{"scale", "-s", "a", "b"}, "scale", "unexpected arguments"},
		{[]string{"devices", "x"}, "devices", "devices takes no arguments"},
		{[]string{"devices", "-x"}, "devices", "not defined: -x"},
		{[]string{"nope"}, "", `unknown command "nope"`},
		{[]string{"help", "nope"}, "", `unknown command "nope"`},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != 2 || out.Len() != 0 {
			t.Errorf("rnet %q: exit %d, stdout %q; want 2 and nothing", c.args, code, out.String())
		}
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		want := []string{"rnet " + c.cmd + ": ", "usage: rnet " + c.cmd, "run 'rnet help " + c.cmd + "' for its flags"}
		if c.cmd == "" {
			want = []string{"rnet: ", "usage: rnet COMMAND [flags]", "run 'rnet help' for the commands"}
		}
		if len(lines) != 3 || !strings.HasPrefix(lines[0], want[0]) || !strings.Contains(lines[0], c.says) ||
			!strings.HasPrefix(lines[1], want[1]) || lines[2] != want[2] {
			t.Errorf("rnet %q: stderr\n%s\nwant %q saying %q, %q, %q", c.args, errb.String(), want[0], c.says, want[1], want[2])
		}
	}
	// With no command at all, the list of commands, on stderr.
	var out, errb bytes.Buffer
	if code := run(nil, &out, &errb); code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), "rnet perf") {
		t.Errorf("rnet alone: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"-v", "--version", "-version", "version"} {
		var out, errb bytes.Buffer
		if code := run([]string{arg}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "rnet ") || errb.Len() != 0 {
			t.Errorf("rnet %s: exit %d, %q %q", arg, code, out.String(), errb.String())
		}
	}
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{nil, "rnet devel"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, "rnet devel (go1.26.0)"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: ""}, Settings: rev}, "rnet devel (commit 0123456789ab, modified, go1.26.0)"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.1.0"}}, "rnet v0.1.0 (go1.26.0)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v0.1.1-0.20261129110000-0123456789ab"}}, "rnet v0.1.1-0.20261129110000-0123456789ab"},
	} {
		if got := versionOf(c.bi, c.bi != nil); got != c.want {
			t.Errorf("versionOf(%+v) = %q, want %q", c.bi, got, c.want)
		}
	}
}
