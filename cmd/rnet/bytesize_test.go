package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{"64": 64, "4K": 4096, "4k": 4096, "64KiB": 64 << 10, "1M": 1 << 20, "1G": 1 << 30, "2GB": 2 << 30, "1T": 1 << 40, "0": 0} {
		if got, err := parseByteSize(in); err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "K", "-1", "1X", "1.5G", "99999999999T"} {
		if got, err := parseByteSize(in); err == nil {
			t.Errorf("parseByteSize(%q) = %d, want an error", in, got)
		}
	}
}

// TestSizesWithSuffixes: perf and ping take sizes as iperf3 does.
func TestSizesWithSuffixes(t *testing.T) {
	o, err := parsePerf([]string{"-c", "10.0.0.2", "-size", "4K", "-n", "1G"}, &bytes.Buffer{})
	if err != nil || o.size != 4096 || o.bytes != 1<<30 {
		t.Errorf("perf -size 4K -n 1G: size %d, bytes %d, %v", o.size, o.bytes, err)
	}
	p, err := parsePing([]string{"10.0.0.2", "-size", "1K"}, &bytes.Buffer{})
	if err != nil || p.size != 1024 {
		t.Errorf("ping -size 1K: size %d, %v", p.size, err)
	}
	if _, err := parsePerf([]string{"-c", "10.0.0.2", "-size", "1T"}, &bytes.Buffer{}); err == nil {
		t.Error("perf -size 1T accepted")
	}
}

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "rnet ") {
		t.Errorf("rnet --version: exit %d, %q %q", code, out.String(), errb.String())
	}
}
