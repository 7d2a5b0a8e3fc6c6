//go:build !linux

package hostlab

import "syscall"

func qemuProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
