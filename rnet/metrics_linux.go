//go:build linux && cgo

package rnet

import (
	"github.com/rnet-dev/rnet/internal/pollgroup"
	"github.com/rnet-dev/rnet/internal/verbs"
)

func (q *verbsQP) deviceName() string { return q.device }

func readResources() verbs.Resources { return verbs.ReadResources() }

func pollGroups() int { return pollgroup.Count() }

func srqRefills() uint64 { return pollgroup.SRQRefills() }

func (q *verbsQP) qpNumber() uint32 { return q.qp.Num() }
