// Package tcpqp is the connection driver's queue pair over an established
// TCP connection: the path a resumed connection takes when no RDMA path is
// left. The ring engine (internal/ring) runs over it unchanged; its work
// requests travel as frames on the byte stream, and the peer's writes land
// in this side's registered regions once their keys and bounds are checked.
//
// The semantics are those of the simulated fabric (internal/simfabric),
// which the engine is tested against:
//   - Work requests reach the peer in posting order. A send completes once
//     its frame has been handed to the kernel (net.Conn.Write returned), so
//     a peer that stops reading fills the send queue and stalls the engine.
//     An unsignaled send produces no completion; its queue entry is free
//     once written.
//   - The peer's frames are queued as they arrive and land in region
//     memory only inside Step, before the completions that announce them,
//     so every access to region memory happens under the connection's lock.
//     The queue is bounded; past the bound the reader stops reading and TCP
//     flow control holds the peer back.
//   - RDMA WRITE and WRITE WITH IMMEDIATE land in a receive region
//     (ring.RegionRecv) whose rkey and range they match; WRITE WITH
//     IMMEDIATE and SEND consume the oldest posted receive.
//   - The peer is not trusted: a frame that is malformed, too long, aimed
//     outside every receive region, or that needs a receive when none is
//     posted moves the queue pair to the error state and fails the
//     transport (TransportFailed) with an error saying what was wrong.
//   - Error state: everything outstanding, and anything posted later,
//     completes with WCWRFlushErr. Frames that arrived before the error
//     still land first; later ones are dropped. Nothing goes out any more
//     but a FIN.
//   - The peer's FIN is the connection manager's DISCONNECTED
//     (TransportDisconnected); a read or write error, including
//     TCP_USER_TIMEOUT, is TransportFailed.
//
// # Frames
//
// Each work request is one frame: a 24-byte header, then the payload.
// Integers are big-endian.
//
//	offset  size  field
//	0       1     opcode: a wr.Opcode (0 RDMA_WRITE, 1 RDMA_WRITE_WITH_IMM,
//	              2 SEND, 3 SEND_WITH_IMM); any other value is refused
//	1       3     reserved: zero; a reader refuses anything else
//	4       4     immediate data (0 when the opcode carries none)
//	8       4     payload length in bytes
//	12      4     rkey of the target region (0 for SEND)
//	16      8     remote address of the first payload byte (0 for SEND)
//	24      n     payload
//
// A reader refuses a payload longer than 64 KiB or its largest receive
// region, whichever is larger.
package tcpqp
