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
// connections set up from cfg: as many handshakes as pendingMemory holds
// at their idle size, and no fewer than minDefaultPending. An iWARP
// connection starts with its whole receive ring (its messages need
// buffers of their own), so unless the listener is on a RoCE or
// InfiniBand device alone (notIWARP), the iWARP size counts: 102 with the
// default Config on RoCE, 26 otherwise.
func defaultMaxPending(cfg ring.Config, notIWARP bool) int {
	cfg.IWARP = false
	idle := pinnedIdle(cfg.Layout())
	if !notIWARP {
		cfg.IWARP = true
		idle = max(idle, pinnedIdle(cfg.Layout()))
	}
	return max(pendingMemory/idle, minDefaultPending)
}

// minDefaultPending keeps a listener whose connections start large able to
// set up a few at once.
const minDefaultPending = 16
