package main

import (
	"errors"
	"flag"
	"strings"
	"testing"
)

// TestSizesWithSuffixes: every size flag takes suffixes and fractions, as
// iperf3's do, and the value lands where the command reads it.
func TestSizesWithSuffixes(t *testing.T) {
	perf := func(field func(perfOpts) int64) func([]string) (int64, error) {
		return func(args []string) (int64, error) { o, err := parsePerf(args); return field(o), err }
	}
	ping := func(field func(pingOpts) int64) func([]string) (int64, error) {
		return func(args []string) (int64, error) { o, err := parsePing(args); return field(o), err }
	}
	scale := func(field func(scaleOpts) int64) func([]string) (int64, error) {
		return func(args []string) (int64, error) { o, err := parseScale(args); return field(o), err }
	}
	perfSize := perf(func(o perfOpts) int64 { return int64(o.size) })
	perfBytes := perf(func(o perfOpts) int64 { return o.bytes })
	pingSize := ping(func(o pingOpts) int64 { return int64(o.size) })
	busyBytes := scale(func(o scaleOpts) int64 { return o.busyBytes })
	for _, c := range []struct {
		args  []string
		parse func([]string) (int64, error)
		want  int64
	}{
		{[]string{"-c", "h", "-size", "4K"}, perfSize, 4096},
		{[]string{"-c", "h", "-size", "1.5M"}, perfSize, 3 << 19},
		{[]string{"-c", "h", "-n", "1G"}, perfBytes, 1 << 30},
		{[]string{"-c", "h", "-n", "2.5GiB"}, perfBytes, 5 << 29},
		{[]string{"-c", "h", "-buffer", "0.5M"}, perf(func(o perfOpts) int64 { return o.rdma.buffer }), 1 << 19},
		{[]string{"-s", "-max-pinned", "1.5G"}, perf(func(o perfOpts) int64 { return o.limits.maxPinned }), 3 << 29},
		{[]string{"-s", "-max-buffered", "64MB"}, perf(func(o perfOpts) int64 { return o.limits.maxBuffered }), 64 << 20},
		{[]string{"h", "-size", "1K"}, pingSize, 1024},
		{[]string{"h", "-buffer", "256KiB"}, ping(func(o pingOpts) int64 { return o.rdma.buffer }), 256 << 10},
		{[]string{"-c", "h", "-busy-bytes", "4M"}, busyBytes, 4 << 20},
		{[]string{"-c", "h", "-busy-bytes", "1.5k"}, busyBytes, 1536},
	} {
		got, err := c.parse(c.args)
		if err != nil || got != c.want {
			t.Errorf("%q: %d, %v; want %d", c.args, got, err, c.want)
		}
	}
}

// TestEverySizeFlagIsAByteSize: a flag whose value is a number of bytes
// (named `bytes` in its usage) reads it with bytesize.Parse, in every
// command, so that none is left reading plain integers.
func TestEverySizeFlagIsAByteSize(t *testing.T) {
	sizes := 0
	for _, c := range commands {
		c.flags().VisitAll(func(f *flag.Flag) {
			kind, _ := flag.UnquoteUsage(f)
			isSize := false
			switch f.Value.(type) {
			case byteSize[int], byteSize[int64]:
				isSize = true
				sizes++
			}
			if (kind == "bytes") != isSize {
				t.Errorf("rnet %s -%s: value %T, usage names it %q", c.name, f.Name, f.Value, kind)
			}
			if !isSize {
				return
			}
			if err := f.Value.Set("1.5K"); err != nil {
				t.Errorf("rnet %s -%s 1.5K: %v", c.name, f.Name, err)
			}
			if err := f.Value.Set("64iB"); err == nil || !strings.Contains(err.Error(), `unknown unit "iB"`) {
				t.Errorf("rnet %s -%s 64iB: %v, want an error naming the unit", c.name, f.Name, err)
			}
		})
	}
	if sizes < 6 {
		t.Errorf("%d size flags found in all; perf alone has 5", sizes)
	}
}

// TestBadSizeIsAUsageError: a size the parser refuses is a usage error
// that says why, and never a size taken in part (64iB was once 64).
func TestBadSizeIsAUsageError(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"perf", "-c", "h", "-size", "64iB"}, `unknown unit "iB"`},
		{[]string{"perf", "-c", "h", "-size", "1.5"}, "fraction of a byte"},
		{[]string{"perf", "-c", "h", "-size", "1T"}, "-size must be in 1.."},
		{[]string{"ping", "h", "-size", "4X"}, `unknown unit "X"`},
		{[]string{"scale", "-c", "h", "-busy-bytes", "parse"}, "not a size"},
	} {
		var err error
		switch c.args[0] {
		case "perf":
			_, err = parsePerf(c.args[1:])
		case "ping":
			_, err = parsePing(c.args[1:])
		case "scale":
			_, err = parseScale(c.args[1:])
		}
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("rnet %q: %v, want a usage error saying %q", c.args, err, c.says)
		}
	}
}
