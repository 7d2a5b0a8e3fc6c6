// Package benchmarks measures rnet on a real RDMA device against TCP over the
// same interfaces, in one run:
//
//	go test -run '^$' -bench . -benchtime 2000x -exec "$PWD/scripts/softroce-vm" ./benchmarks/
//
// Each benchmark has an rdma and a tcp sub-benchmark. The rdma ones need a
// device pair (internal/rdmatest: RNET_TEST_SERVER and RNET_TEST_CLIENT, set
// by the Soft-RoCE lab) and skip without one, so on a plain host only the
// TCP baselines run; the host's rnet-over-simulated-fabric benchmarks are in
// package rnet (go test -bench BenchmarkSim ./rnet), because the simulated
// connection is internal to it. `make bench` compares rnet with rstream,
// ib_write_bw and ib_write_lat in the guest.
package benchmarks
