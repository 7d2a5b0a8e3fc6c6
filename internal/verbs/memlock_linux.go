package verbs

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// lockedMemoryCause returns why a registration of region bytes that failed
// with errno was refused, when the locked-memory limit explains it, and nil
// otherwise.
func lockedMemoryCause(errno syscall.Errno, region int) *LockedMemoryError {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return nil
	}
	s := memlockState{soft: rl.Cur, hard: rl.Max, exempt: exemptFromLockedMemoryLimit(), pinned: pinnedBytes()}
	return s.cause(errno, region, os.Getpagesize())
}

// memlockState is what decides whether the locked-memory limit refused a
// registration: the limit (RLIMIT_MEMLOCK), whether the process is exempt
// from it, and how much it has pinned (-1 if unknown).
type memlockState struct {
	soft, hard uint64
	exempt     bool
	pinned     int64
}

// cause applies the kernel's rule: every registration adds its pages to the
// process's pinned pages (VmPin), and one that would take them past
// RLIMIT_MEMLOCK is refused unless the process is exempt. The kernel says
// ENOMEM; some older kernels and drivers say EPERM or EAGAIN.
func (s memlockState) cause(errno syscall.Errno, region, page int) *LockedMemoryError {
	if errno != syscall.ENOMEM && errno != syscall.EPERM && errno != syscall.EAGAIN {
		return nil
	}
	if s.soft == unix.RLIM_INFINITY || s.exempt {
		return nil
	}
	if s.pinned >= 0 {
		// The kernel compares whole pages. A registration that fits was
		// refused for something else, such as memory truly running out;
		// naming the limit then would send the user the wrong way.
		pg := uint64(page)
		if (uint64(s.pinned)+uint64(region)+pg-1)/pg <= s.soft/pg {
			return nil
		}
	}
	return &LockedMemoryError{Soft: s.soft, Hard: s.hard, Pinned: s.pinned, Region: region}
}

// exemptFromLockedMemoryLimit reports whether the kernel lets this process
// pin past RLIMIT_MEMLOCK: it must hold CAP_IPC_LOCK, and in the initial user
// namespace, since the kernel's check ignores a capability held only inside
// a user namespace (root in a rootless container).
func exemptFromLockedMemoryLimit() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	if data[unix.CAP_IPC_LOCK/32].Effective&(1<<(unix.CAP_IPC_LOCK%32)) == 0 {
		return false
	}
	return inInitialUserNamespace()
}

// inInitialUserNamespace reports whether /proc/self/uid_map maps every uid
// to itself, as only the initial user namespace does. Unreadable counts as
// yes: without /proc there is no telling, and most processes are there.
func inInitialUserNamespace() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true
	}
	return strings.Join(strings.Fields(string(b)), " ") == "0 0 4294967295"
}

// pinnedBytes is the memory this process has pinned (VmPin in
// /proc/self/status), which registrations count against RLIMIT_MEMLOCK, or
// -1 if it cannot be read.
func pinnedBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmPin:"))
		if !ok {
			continue
		}
		num, ok := strings.CutSuffix(strings.TrimSpace(string(rest)), " kB")
		if !ok {
			return -1
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil || kb < 0 {
			return -1
		}
		return kb << 10
	}
	return -1
}
