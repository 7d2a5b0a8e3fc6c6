//go:build linux

package verbs

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// osThreads is the process's OS thread count from /proc/self/status.
func osThreads(t testing.TB) int {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads: line in /proc/self/status")
	return 0
}

// waitParked returns once at least n goroutines are parked in the netpoller
// ("IO wait"). It polls the goroutine dump, yielding in between: a condition
// wait, not a sleep.
func waitParked(t testing.TB, n int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(60 * time.Second)
	for {
		for {
			m := runtime.Stack(buf, true)
			if m < len(buf) {
				buf = buf[:m]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		if c := bytes.Count(buf, []byte("[IO wait")); c >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d goroutines parked in the netpoller, want %d", bytes.Count(buf, []byte("[IO wait")), n)
		}
		buf = buf[:cap(buf)]
		runtime.Gosched()
	}
}
