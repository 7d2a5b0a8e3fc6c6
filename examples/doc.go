// Package examples holds runnable programs that use rnet: echo (a raw
// net.Conn echo with latency and throughput figures) and grpc (a gRPC service
// with unary and streaming calls). Both take -tcp to run the same code over TCP.
// `make demo` runs them between two endpoints and compares rnet with TCP.
package examples
