package rnet

import (
	"os"

	"github.com/rnet-dev/rnet/internal/ring"
)

// What a connection end pins, and the listener bound that follows from it.

// pinnedPerConn is the most memory one connection end registers, and so
// pins, with both rings at their maximum: each region rounded up to whole
// pages, as it is mapped and registered. (A ring that moves holds its old
// region a little longer; an idle connection pins much less, see
// pinnedIdle.)
func pinnedPerConn(l ring.Layout) int {
	return pages(l.MaxSendRegion) + pages(l.MaxRecvRegion) + pages(l.TargetRegion)
}

// pinnedIdle is what a connection end pins with both rings at their idle
// size.
func pinnedIdle(l ring.Layout) int {
	return pages(l.SendRegion) + pages(l.RecvRegion) + pages(l.TargetRegion)
}

func pages(n int) int {
	page := os.Getpagesize()
	return (n + page - 1) / page * page
}

// pendingMemory is what the handshakes a listener has in progress may pin
// by default: half of a common 8 MiB RLIMIT_MEMLOCK. A handshake pins a
// connection end's idle rings until its dialer confirms it.
const pendingMemory = 4 << 20

// defaultMaxPending is ListenConfig.MaxPendingHandshakes's default for
// connections laid out as l: as many handshakes as pendingMemory holds
// (102 with the default Config), and no fewer than minDefaultPending.
func defaultMaxPending(l ring.Layout) int {
	return max(pendingMemory/pinnedIdle(l), minDefaultPending)
}

// minDefaultPending keeps a listener whose connections start large able to
// set up a few at once.
const minDefaultPending = 16
