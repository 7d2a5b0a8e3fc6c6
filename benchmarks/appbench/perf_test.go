package main

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/rnet-dev/rnet/internal/rdmatest"
)

func TestParsePerfStat(t *testing.T) {
	n, err := parsePerfStat("29,,raw_syscalls:sys_enter,36017531,100.00,,\n")
	if err != nil || n != 29 {
		t.Errorf("parsePerfStat = %d, %v; want 29", n, err)
	}
	for _, bad := range []string{
		"<not counted>,,raw_syscalls:sys_enter,0,0.00,,\n",
		"<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n",
		"event syntax error: 'raw_syscalls:sys_enter'\n",
		"",
	} {
		if n, err := parsePerfStat(bad); err == nil {
			t.Errorf("parsePerfStat(%q) = %d, want an error", bad, n)
		}
	}
}

// TestPerfCountsSyscalls: a count of every system call sees the system
// calls made between begin and end. It needs perf and the right to trace
// this process (root in the lab, where it must work).
func TestPerfCountsSyscalls(t *testing.T) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		if rdmatest.Required() {
			t.Fatal("no perf in the lab:", err)
		}
		t.Skip("no perf:", err)
	}
	sc := newSyscallCounter(perf)
	if !sc.begin() {
		if rdmatest.Required() {
			t.Fatal("perf does not count in the lab (see stderr)")
		}
		t.Skip("perf cannot count this process's system calls here (see stderr)")
	}
	const calls = 5000
	for range calls {
		syscall.Getppid()
	}
	n := sc.end()
	if n == nil || *n < calls || *n > 10*calls {
		t.Fatalf("counted %v system calls around %d getppid calls", n, calls)
	}
	if sc.end() != nil {
		t.Error("a second end returned a count")
	}
}
