package rnet

import (
	"context"
	"net/netip"
	"sync/atomic"
)

// Hooks that tests set; nil in a program. They are atomic because the
// acceptor's and the dialer's goroutines read them while a test sets them.
var (
	// testHookDialRDMA stands in for DialConn's RDMA attempt.
	testHookDialRDMA atomic.Pointer[func(ctx context.Context, network, address string) (*Conn, error)]

	// testHookSetupStage is called as each resource of a connection is
	// made (by the accepting side or the dialling one), and fails the
	// setup where it returns an error, as a device refusing that resource
	// would: the error paths release what they made, and tests check it.
	testHookSetupStage atomic.Pointer[func(accepting bool, stage string) error]

	// testHookResumeCandidates replaces the addresses a dialer's resume
	// tries over RDMA: none stands for a host with no RDMA path left.
	testHookResumeCandidates atomic.Pointer[func([]netip.AddrPort) []netip.AddrPort]
)

// setupStage fails a connection's setup at stage where testHookSetupStage
// says so.
func setupStage(accepting bool, stage string) error {
	if hook := testHookSetupStage.Load(); hook != nil {
		return (*hook)(accepting, stage)
	}
	return nil
}
