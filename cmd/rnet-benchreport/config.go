package main

type config struct {
	rnet           string
	runs           int
	out            string
	server, client string
	sdev, cdev     string
	gid            int
	scale          float64
	port           int
	verbose        bool
	rnetBuffer     int
	gofloor        string   // benchmarks/gofloor, or "" to skip the floor
	gofloorC       string   // its C twin
	rnetCounting   string   // rnet built with -tags rnet_lockcount, or "" to count no locks
	appbench       string   // benchmarks/appbench, or "" to measure no applications
	appbenchRun    string   // appbench -run: the workloads to measure, "" for all
	perf           string   // perf, for appbench's count of every system call, or ""
	serverExec     []string // a command that runs its arguments on the server's host, or nil to run servers here

	// clientTCPSegments is, with serverExec, how many TCP segments this
	// host sent and received from the last client's start to its last line
	// of output, its result (NaN where that cannot be read): in an RDMA
	// test, the control path's traffic during the measurement. Set by
	// runClientCounted, read by measure after each test.
	clientTCPSegments float64
}

func (c *config) scaled(n, min int) int {
	return max(int(float64(n)*c.scale), min)
}
