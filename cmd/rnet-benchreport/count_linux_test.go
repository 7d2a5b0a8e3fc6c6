package main

import (
	"math"
	"os/exec"
	"testing"
)

// TestRunCountedCountsWrites: a process that makes 200 write calls is
// counted with at least those.
func TestRunCountedCountsWrites(t *testing.T) {
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 200 ]; do echo x >/dev/null; i=$((i+1)); done")
	n, err := runCounted(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if math.IsNaN(n) || n < 200 {
		t.Errorf("counted %v read and write calls, want at least 200", n)
	}
}
