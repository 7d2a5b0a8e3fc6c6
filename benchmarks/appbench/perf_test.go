package main

import (
	"maps"
	"os/exec"
	"syscall"
	"testing"

	"github.com/rnet-dev/rnet/internal/rdmatest"
)

func TestParsePerfStat(t *testing.T) {
	c, err := parsePerfStat("29,,raw_syscalls:sys_enter,36017531,100.00,,\n7,,syscalls:sys_enter_futex,36017531,100.00,,\n" +
		"<not counted>,,syscalls:sys_enter_ioctl,0,0.00,,\n")
	if err != nil || c.all != 29 || !maps.Equal(c.byName, map[string]uint64{"futex": 7}) {
		t.Errorf("parsePerfStat = %+v, %v; want 29 and futex 7", c, err)
	}
	for _, bad := range []string{
		"<not counted>,,raw_syscalls:sys_enter,0,0.00,,\n",
		"<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n",
		"7,,syscalls:sys_enter_futex,36017531,100.00,,\n",
		"event syntax error: 'raw_syscalls:sys_enter'\n",
		"",
	} {
		if c, err := parsePerfStat(bad); err == nil {
			t.Errorf("parsePerfStat(%q) = %+v, want an error", bad, c)
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
	if n == nil || n.all < calls || n.all > 10*calls {
		t.Fatalf("counted %+v system calls around %d getppid calls", n, calls)
	}
	if sc.end() != nil {
		t.Error("a second end returned a count")
	}
}
