//go:build !linux

package main

import (
	"math"
	"os/exec"
)

// runCounted runs cmd; counting its system calls needs Linux's /proc.
func runCounted(cmd *exec.Cmd) (float64, error) { return math.NaN(), cmd.Run() }
