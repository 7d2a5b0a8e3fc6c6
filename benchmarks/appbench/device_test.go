package main

import (
	"net"
	"net/http"
	"os/exec"
	"testing"

	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// TestWorkloadsOverDevice runs every workload briefly over rnet on the lab's
// devices, with perf counting every system call where it is installed.
func TestWorkloadsOverDevice(t *testing.T) {
	pair := rdmatest.Require(t)
	perf, _ := exec.LookPath("perf")
	server := &transport{}
	gln, err := server.Listen(net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	hln, err := server.Listen(net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		gln.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serveOn(server, gln, hln, perf, http.HandlerFunc(dataHandler)) }()
	defer func() {
		gln.Close()
		hln.Close()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}()
	// One process is both sides here, so its counters count both: only the
	// results' presence is checked, not the split.
	results, err := runAll(t, &transport{from: net.IP(pair.Client.AsSlice())}, gln.Addr().String(), hln.Addr().String(), "", perf)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, results, "rdma")
	for _, r := range results {
		if perf != "" && (r.Client.SyscallsAll == nil || r.Server.SyscallsAll == nil || *r.Client.SyscallsAll < r.Client.Syscalls || r.Client.SyscallsByName["futex"] <= 0) {
			t.Errorf("%s/%d: perf's count of every system call: client %v, server %v; read/write calls %v", r.Workload, r.Size, r.Client.SyscallsAll, r.Server.SyscallsAll, r.Client.Syscalls)
		}
	}
}
