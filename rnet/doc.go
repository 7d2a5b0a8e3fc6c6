// Package rnet gives Go programs a net.Conn and net.Listener over RDMA, speaking
// librdmacm rsocket's stream protocol (version 1).
//
// # What happens underneath
//
// RDMA moves bytes between registered memory of two machines without the
// kernel on the data path. rnet sets up a reliable-connected queue pair with
// the RDMA connection manager (librdmacm), exactly as C rsocket does, and
// carries a byte stream over it: Write copies into a registered send ring, and
// the bytes are RDMA-written straight into the peer's registered receive ring,
// as far as the peer has granted credits. Read copies out of the receive ring
// and, by consuming, grants the peer new credits. So a C program using rsocket
// (rstream, or any socket program under librspreload.so) can talk to an rnet
// peer in both directions.
//
// Addresses are IP addresses of RDMA-capable interfaces (an InfiniBand IPoIB
// address, a RoCE NIC's address, an iWARP NIC's address), with a port in
// rdma_cm's TCP port space: rnet.Listen("rdma", "10.0.0.1:7471").
//
// # Being a good Go citizen
//
// A blocked Read, Write or Accept parks its goroutine in the runtime
// netpoller: the connections of a device share a poll group, whose first
// blocked caller waits on the group's completion channel and hands each
// waiter the completions that are its connection's, so a wakeup reaches
// the goroutine that needs the data, and idle connections cost no OS
// thread. A Read that waits for the reply to a Write
// first spins on the completion queue for about twice the recent reply
// time, or as long as a park has been measured to cost if that is longer
// (Config.BusyPoll, Config.BusyPollLimit), because a park and wakeup can
// cost more than the reply takes. Other waits spin Config.BusyPoll, and a
// streaming reader stops spinning while its spins rarely catch data.
// Deadlines, CloseWrite,
// *net.OpError, net.ErrClosed and io.EOF behave as they do for *net.TCPConn,
// which is what lets gRPC, net/http and yamux run over rnet unchanged. Dial
// races a name's IPv4 and IPv6 addresses as net.Dialer does, and a Conn or
// Listener dropped without Close is closed by the garbage collector, as a
// socket is; still, close them, since queue pairs run out long before file
// descriptors do.
//
// # Platforms
//
// rnet needs Linux, cgo, libibverbs and librdmacm (Debian: libibverbs-dev,
// librdmacm-dev). Elsewhere every call returns an error saying so.
package rnet
