// Package benchmarks measures rnet on a real RDMA device against TCP over the
// same interfaces, in one run:
//
//	go -C benchmarks test -run '^$' -bench . -benchtime 2000x -exec "$PWD/scripts/softroce-vm" .
//
// Each benchmark has an rdma and a tcp sub-benchmark. The rdma ones need a
// device pair (internal/rdmatest: RNET_TEST_SERVER and RNET_TEST_CLIENT, set
// by the Soft-RoCE lab) and skip without one, so on a plain host only the
// TCP baselines run. BenchmarkSim* measure rnet over the simulated fabric
// (package rnettest) against TCP over loopback on any host
// (go -C benchmarks test -bench BenchmarkSim .); the poll-group one is in
// package rnet, whose internals it needs. `make bench` compares rnet with rstream,
// ib_write_bw and ib_write_lat in the guest.
package benchmarks
