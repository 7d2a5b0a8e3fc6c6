package verbs

import "golang.org/x/sys/unix"

// LockedMemoryLimit returns RLIMIT_MEMLOCK's soft limit in bytes
// (unix.RLIM_INFINITY for none), and whether this process is exempt from
// it (CAP_IPC_LOCK in the initial user namespace), in which case it may pin
// past the limit. ok is false if the limit cannot be read.
func LockedMemoryLimit() (limit uint64, exempt, ok bool) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return 0, false, false
	}
	return rl.Cur, exemptFromLockedMemoryLimit(), true
}
