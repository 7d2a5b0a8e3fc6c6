package main

import (
	"bytes"
	"testing"
)

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
