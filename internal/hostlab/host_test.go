package hostlab

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestThreadsStopped: a process reads as stopped only between SIGSTOP and
// SIGCONT, which Freeze waits for.
func TestThreadsStopped(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command:", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	pid := cmd.Process.Pid
	if threadsStopped(pid) {
		t.Fatal("a running process reads as stopped")
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	waitStopped := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for threadsStopped(pid) != want {
			if time.Now().After(deadline) {
				t.Fatalf("stopped: want %v after 10s", want)
			}
			time.Sleep(time.Millisecond) // between readings of a real condition
		}
	}
	waitStopped(true)
	cmd.Process.Signal(syscall.SIGCONT)
	waitStopped(false)
	if threadsStopped(1 << 30) {
		t.Error("a process that does not exist reads as stopped")
	}
}
