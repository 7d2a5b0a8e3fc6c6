package hostlab

import "syscall"

// qemuProcAttr puts qemu in a process group of its own, so that a SIGSTOP
// for the guest stops no one else, and kills it with us, so that a test
// binary that dies leaves no guest running.
func qemuProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
