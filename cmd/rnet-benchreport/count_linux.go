package main

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// runCounted runs cmd and returns how many system calls its process made
// (read and write calls of /proc/<pid>/io, which on rxe are the device's
// doorbells and channel reads), read once it has exited but before it is
// reaped, so that nothing it did is missed.
func runCounted(cmd *exec.Cmd) (float64, error) {
	if err := cmd.Start(); err != nil {
		return math.NaN(), err
	}
	syscalls := math.NaN()
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			if err == nil {
				syscalls, _ = procSyscalls(cmd.Process.Pid)
			}
			break
		}
	}
	return syscalls, cmd.Wait()
}

// procSyscalls reads the system call counts of a process (or zombie).
func procSyscalls(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return math.NaN(), err
	}
	defer f.Close()
	var n uint64
	seen := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok || (k != "syscr" && k != "syscw") {
			continue
		}
		x, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return math.NaN(), err
		}
		n += x
		seen++
	}
	if seen != 2 {
		return math.NaN(), fmt.Errorf("/proc/%d/io: no syscr and syscw", pid)
	}
	return float64(n), sc.Err()
}

// tcpSegments is how many TCP segments this host has received and sent
// (InSegs + OutSegs of /proc/net/snmp), or NaN if that cannot be read.
func tcpSegments() float64 {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return math.NaN()
	}
	n, err := snmpTCPSegments(string(b))
	if err != nil {
		return math.NaN()
	}
	return n
}

// snmpTCPSegments reads InSegs + OutSegs from /proc/net/snmp's text: a
// "Tcp:" line of names followed by a "Tcp:" line of values.
func snmpTCPSegments(snmp string) (float64, error) {
	var names []string
	for _, line := range strings.Split(snmp, "\n") {
		fields, ok := strings.CutPrefix(line, "Tcp: ")
		if !ok {
			continue
		}
		if names == nil {
			names = strings.Fields(fields)
			continue
		}
		values := strings.Fields(fields)
		var sum float64
		found := 0
		for i, name := range names {
			if (name == "InSegs" || name == "OutSegs") && i < len(values) {
				v, err := strconv.ParseUint(values[i], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("/proc/net/snmp Tcp %s %q: %w", name, values[i], err)
				}
				sum += float64(v)
				found++
			}
		}
		if found != 2 {
			return 0, errors.New("/proc/net/snmp: no Tcp InSegs and OutSegs")
		}
		return sum, nil
	}
	return 0, errors.New("/proc/net/snmp: no Tcp lines")
}
