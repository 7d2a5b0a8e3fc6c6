package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// perfEvent counts every entry into a system call, whichever it is.
const perfEvent = "raw_syscalls:sys_enter"

// perfSyscalls are the system calls perf also counts one by one, where the
// kernel has their tracepoints: those of waits and wakeups (futex,
// epoll_pwait, nanosleep, sched_yield, ppoll), and of the device (ioctl;
// read and write, which are also a socket's).
var perfSyscalls = []string{"futex", "epoll_pwait", "epoll_wait", "nanosleep", "clock_nanosleep", "sched_yield",
	"ppoll", "poll", "ioctl", "read", "write", "tgkill"}

// perfEvents are the events perf counts: perfEvent, and perfSyscalls'
// tracepoints that this kernel has (perf refuses an unknown event).
var perfEvents = sync.OnceValue(func() []string {
	events := []string{perfEvent}
	for _, name := range perfSyscalls {
		for _, dir := range []string{"/sys/kernel/tracing/events/syscalls/", "/sys/kernel/debug/tracing/events/syscalls/"} {
			if _, err := os.Stat(dir + "sys_enter_" + name); err == nil {
				events = append(events, perfSyscallPrefix+name)
				break
			}
		}
	}
	return events
})

const perfSyscallPrefix = "syscalls:sys_enter_"

// perfAttachTimeout bounds how long perf may take to start counting.
const perfAttachTimeout = 30 * time.Second

// perfCount is perf stat counting this process's system calls.
type perfCount struct {
	cmd *exec.Cmd
	out bytes.Buffer // perf's output (-x, goes to stderr)
	ctl *os.File     // perf's control channel: our end
}

// startPerf runs perf stat on this process and returns once it counts:
// perf answers a ping on its control channel only from its counting loop.
// Threads the process starts afterwards may go uncounted.
func startPerf(perf string) (*perfCount, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	defer ackR.Close()
	p := &perfCount{ctl: ctlW}
	p.cmd = exec.Command(perf, "stat", "-e", strings.Join(perfEvents(), ","), "-x,", "-p", strconv.Itoa(os.Getpid()), "--control", "fd:3,4")
	p.cmd.ExtraFiles = []*os.File{ctlR, ackW} // fds 3 and 4
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	err = p.cmd.Start()
	ctlR.Close()
	ackW.Close()
	if err != nil {
		ctlW.Close()
		return nil, fmt.Errorf("perf stat: %w", err)
	}
	ackR.SetReadDeadline(time.Now().Add(perfAttachTimeout))
	_, err = ctlW.Write([]byte("ping\n"))
	if err == nil {
		var line string
		line, err = bufio.NewReader(ackR).ReadString('\n')
		if err == nil && line != "ack\n" {
			err = fmt.Errorf("answered %q to a ping", line)
		}
	}
	if err != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		ctlW.Close()
		return nil, fmt.Errorf("perf stat -e %s -p %d: %v: %s", perfEvent, os.Getpid(), err, strings.TrimSpace(p.out.String()))
	}
	return p, nil
}

// stop ends the count and returns it.
func (p *perfCount) stop() (syscallCount, error) {
	defer p.ctl.Close()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		return syscallCount{}, fmt.Errorf("perf stat: %w", err)
	}
	// perf prints its count and then dies of the interrupt, as asked.
	if err := p.cmd.Wait(); err != nil && !interrupted(err) {
		return syscallCount{}, fmt.Errorf("perf stat: %v: %s", err, strings.TrimSpace(p.out.String()))
	}
	return parsePerfStat(p.out.String())
}

func interrupted(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGINT
}

// syscallCount is what perf counted: every system call, and some by name.
type syscallCount struct {
	all    uint64
	byName map[string]uint64
}

// parsePerfStat reads perf stat -x,'s counts: perfEvent's, which it needs,
// and those of perfSyscalls it finds.
func parsePerfStat(out string) (syscallCount, error) {
	c := syscallCount{byName: map[string]uint64{}}
	found := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		switch name, isSyscall := strings.CutPrefix(f[2], perfSyscallPrefix); {
		case f[2] == perfEvent && err != nil:
			return c, fmt.Errorf("perf stat counted %q of %s", f[0], perfEvent)
		case f[2] == perfEvent:
			c.all, found = n, true
		case isSyscall && err == nil:
			c.byName[name] = n
		}
	}
	if !found {
		return c, errors.New("perf stat printed no count of " + perfEvent + ": " + strings.TrimSpace(out))
	}
	return c, nil
}

// syscallCounter counts every system call of the process between begin and
// end with perf, if it was given one and perf works; after perf fails once
// it counts nothing, and says why on stderr.
type syscallCounter struct {
	mu      sync.Mutex
	perf    string     // guarded by mu; "" when not counting
	running *perfCount // guarded by mu
}

func newSyscallCounter(perf string) *syscallCounter { return &syscallCounter{perf: perf} }

// begin starts a count; false if none is made.
func (s *syscallCounter) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != nil {
		s.running.stop()
		s.running = nil
	}
	if s.perf == "" {
		return false
	}
	p, err := startPerf(s.perf)
	if err != nil {
		s.disableLocked(err)
		return false
	}
	s.running = p
	return true
}

// end returns the count since begin, or nil if there is none.
func (s *syscallCounter) end() *syscallCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.running
	if p == nil {
		return nil
	}
	s.running = nil
	n, err := p.stop()
	if err != nil {
		s.disableLocked(err)
		return nil
	}
	return &n
}

func (s *syscallCounter) disableLocked(err error) {
	fmt.Fprintf(os.Stderr, "appbench: not counting every system call: %v\n", err)
	s.perf = ""
}
