package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"
	"github.com/rnet-dev/rnet/internal/perfjson"
	"github.com/rnet-dev/rnet/rnet/rnettest"
)

// decodeStrictly decodes out, which must hold one JSON value and nothing
// else, into v, failing on a field v does not declare.
func decodeStrictly(t *testing.T, out []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s does not decode into %T: %v", out, v, err)
	}
	if err := dec.Decode(new(json.RawMessage)); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: more than one JSON value (%v)", out, err)
	}
}

// TestJSONMatchesSharedSchema: what perf and ping print with --json is
// the schema rnet-benchreport reads, field for field.
func TestJSONMatchesSharedSchema(t *testing.T) {
	srv := startCmd(t, "perf", "-s", "127.0.0.1:0", "-tcp")
	runOut := func(args ...string) []byte {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("rnet %q: exit %d: %s", args, code, errb.String())
		}
		return out.Bytes()
	}

	var pr perfjson.PerfResult
	decodeStrictly(t, runOut("perf", "-c", srv.addr, "-tcp", "-P", "2", "-n", "1000000", "-size", "1000", "-i", "1ms", "--json", "-q"), &pr)
	if pr.Test != "perf" || pr.Parallel != 2 || len(pr.Streams) != 2 || pr.Bytes != 1000000 || len(pr.Intervals) == 0 || len(pr.Intervals[0].Streams) != 2 {
		t.Errorf("perf -P 2 result: %+v", pr)
	}

	var sw perfjson.SweepResult
	decodeStrictly(t, runOut("perf", "-c", srv.addr, "-tcp", "-a", "-n", "1024", "--json", "-q"), &sw)
	if sw.Test != "perf-sweep" || len(sw.Results) == 0 || sw.Results[0].Test != "perf" {
		t.Errorf("perf -a result: %+v", sw)
	}

	var pg perfjson.PingResult
	decodeStrictly(t, runOut("ping", srv.addr, "-tcp", "-c", "20", "-warmup", "2", "--json", "-q"), &pg)
	if pg.Test != "ping" || pg.Count != 20 || pg.MeanUs <= 0 {
		t.Errorf("ping result: %+v", pg)
	}
}

// TestPingReportsLocksWhenCounted: ping reports the locks its process took
// per round trip in a build that counts them (-tags rnet_lockcount), in its
// JSON and its text line, and nothing of locks in any other build.
func TestPingReportsLocksWhenCounted(t *testing.T) {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := serveLimited(t, ln, testLimits)
	ping := func(json bool) []byte {
		t.Helper()
		c, err := f.Dial("rdma", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var out, errb bytes.Buffer
		o := pingOpts{size: 64, count: 50, warmup: 5, progressEvery: time.Hour, json: json, quiet: true}
		if err := pingConn(c, o, &out, &errb); err != nil {
			t.Fatalf("ping over the simulated fabric: %v; stderr: %s", err, errb.String())
		}
		return out.Bytes()
	}

	var pg perfjson.PingResult
	decodeStrictly(t, ping(true), &pg)
	if pg.Count != 50 || pg.CgoPerTrip == nil {
		t.Fatalf("ping result over rnet: %+v", pg)
	}
	switch {
	case !lockcount.Enabled && pg.LocksPerTrip != nil:
		t.Errorf("a build that counts no locks reports %v locks per round trip", *pg.LocksPerTrip)
	case lockcount.Enabled && pg.LocksPerTrip == nil:
		t.Error("a build that counts locks reports none per round trip")
	case lockcount.Enabled && *pg.LocksPerTrip < 1:
		// Every Write and Read of a connection takes its lock.
		t.Errorf("%v locks per round trip, want at least the connection's own", *pg.LocksPerTrip)
	}

	line := string(ping(false))
	if got := strings.Contains(line, " locks"); got != lockcount.Enabled {
		t.Errorf("text line %q names locks: %v, want %v (lockcount.Enabled)", line, got, lockcount.Enabled)
	}
	if !strings.Contains(line, "cgo calls") {
		t.Errorf("text line %q lacks the cgo calls", line)
	}
}

// TestJSONKeysAreSnakeCase: every --json output of every command, and
// everything nested in it, has snake_case keys (mb_per_s, not MBps), each
// set by a tag rather than left to the Go field's name.
func TestJSONKeysAreSnakeCase(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	seen := map[reflect.Type]bool{}
	var check func(path string, typ reflect.Type)
	check = func(path string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
				continue
			case name == "" && !f.Anonymous:
				t.Errorf("%s.%s (%s) has no json tag: its key would be %q", path, f.Name, typ, f.Name)
			case name != "" && !snake.MatchString(name):
				t.Errorf("%s.%s (%s): key %q is not snake_case", path, f.Name, typ, name)
			}
			check(path+"."+f.Name, f.Type)
		}
	}
	for name, v := range map[string]any{
		"perf -c":       perfjson.PerfResult{},
		"perf -c -a":    perfjson.SweepResult{},
		"perf -s":       ServerResult{},
		"ping":          perfjson.PingResult{},
		"scale -c":      ScaleResult{},
		"devices":       []Device{},
		"errors":        ErrorResult{},
		"scale control": scaleReply{},
	} {
		check(name, reflect.TypeOf(v))
	}
}
