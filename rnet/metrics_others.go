//go:build !linux || !cgo

package rnet

import "github.com/rnet-dev/rnet/internal/verbs"

// Without RDMA support the process holds nothing on a device.
func readResources() verbs.Resources { return verbs.Resources{} }

func pollGroups() int { return 0 }

func srqRefills() uint64 { return 0 }
