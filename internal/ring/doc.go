// Package ring is the sans-IO engine of one rsocket (librdmacm) version 1
// stream connection: it keeps the accounting of the send ring, the receive
// ring, the peer's target SGL and the credits, and turns application reads
// and writes into the verbs work requests a driver must post.
//
// # Why sans-IO
//
// The engine performs no I/O, starts no goroutines, reads no clock and
// uses no cgo. The rnet driver executes its work requests on real verbs; the
// simulated fabric in internal/simfabric executes the very same requests in
// tests. All memory it touches is handed in by the caller as three Regions
// (registered memory in production, plain byte slices in tests).
//
// # Contract with the driver
//
// An Engine is single-threaded: the driver serialises every call, typically
// with one mutex per connection. A driver loop looks like this:
//
//	n := pollCQ(wcs)                 // ibv_poll_cq
//	err := e.Complete(wcs[:n])       // account completions, parse messages
//	recvs = e.PostRecvs(recvs[:0])   // re-post one receive per receive completion
//	postRecv(recvs)                  // ibv_post_recv, BEFORE PostSends (see below)
//	sends = e.PostSends(sends[:0])   // data, credit updates, control messages
//	postSend(sends)                  // ibv_post_send
//
// Rules the driver must keep:
//
//   - Post every receive and send work request returned, in the order returned, before the
//     next call to PostSends or PostRecvs. The engine counts them as posted.
//     If a post fails, call Fail: the connection cannot be repaired.
//   - Receives returned by PostRecvs must be posted before the SendWRs of the
//     following PostSends. The engine never grants credits for messages whose
//     receive has not been handed back, so a peer can never be invited to
//     send into a receive queue that is short of entries.
//   - Hold the same lock around polling the CQ and Complete. The peer writes
//     SGL updates into the target region at any time; the engine reads that
//     region only while processing completions.
//   - Imm fields are in host byte order: convert with htonl/ntohl at the verbs
//     boundary.
//   - Inline SendWRs point into the send region; the driver (or the
//     device) copies those bytes when posting, so they need only stay valid
//     until ibv_post_send returns. Non-inline ones stay valid until their
//     completion, which the engine guarantees.
//   - Every SendWR has Signaled set (rsocket creates its QP with
//     sq_sig_all=1): completions are how sbuf space and control slots return.
//
// # Memory and remote access
//
// Register the receive region and the target region with
// LOCAL_WRITE|REMOTE_WRITE and the send region with LOCAL_WRITE only. Never
// grant REMOTE_READ: rsocket never issues RDMA READ. A peer can write
// anywhere in a registered receive region; what the engine does guarantee
// is that it only ever reads bytes a peer announced inside the half it had
// been granted, and that it never reads outside its regions, whatever the
// peer claims.
//
// # Rings that grow
//
// Both rings start at Config.IdleBufferSize and move to larger regions
// when busy and back to small ones when quiet (regions.go). The engine
// cannot register memory: after each step the driver serves RegionWanted
// with AddRegion (or DeclineRegion), deregisters what RetiredRegions
// returns, and calls Quiet from a timer. Give each region its own
// registration, in the connection's own protection domain, so that no key
// the peer ever saw reaches another connection's memory.
//
// # Files
//
// In reading order, each building on those before it:
//
//   - imm.go: the message word (Msg) and its operations.
//   - errors.go: the errors, ProtocolError and CompletionError.
//   - conndata.go: the private data exchanged when connecting.
//   - config.go: Config, its defaults, and the Layout of the regions.
//   - region.go: Region, the memory handed to the engine.
//   - engine.go: the Engine's state, New, Establish, and its queries.
//   - cork.go: autocorking.
//   - regions.go: rings that move to larger and smaller regions.
//   - send.go: Write, the close requests, and the sends PostSends returns.
//   - sgl.go: the target SGL the peer writes its buffer grants into.
//   - recv.go: Read, PostRecvs, and the messages receive completions carry.
//   - complete.go: Complete, and what the driver must post or poll next.
//   - lend.go: ring memory lent to a driver that copies without its lock.
//   - retain.go: sent bytes kept until the peer has them
//     (Config.RetainUntilReceived).
//   - lost.go: completions lost with a queue pair.
//   - takeover.go: a connection taken over on a fresh queue pair (resume).
package ring
