// Package simfabric is a test double: an in-memory simulated RDMA fabric of
// reliable-connected (RC) queue pairs that executes the work requests of
// internal/ring exactly as a driver would post them to verbs.
//
// What it models:
//   - RC ordering: the work requests of one endpoint reach its peer in
//     posting order; their send completions come back in posting order.
//   - RDMA WRITE and RDMA WRITE WITH IMMEDIATE into the peer's registered
//     memory, checked against rkey, range and remote-write permission
//     (a violation is WCRemAccessErr and takes both queue pairs to error).
//   - WRITE WITH IMMEDIATE and SEND consume the peer's oldest posted receive.
//     A missing receive is an RNR: by default a WCRNRRetryExcErr on the sender,
//     counted in Stats.RNR; with Options.RNRRetry the message waits, as with
//     rnr_retry_count=7, and is counted in Stats.RNRStalls.
//   - Inline sends (their bytes are copied at post time), local keys and
//     ranges of SGEs, queue depths.
//   - Error state: after an error completion, everything outstanding on that
//     queue pair completes with WCWRFlushErr, and so does anything posted
//     later.
//   - Faults: Kill (a peer that silently disappears: sends to it fail with
//     WCRetryExcErr), Disconnect (both queue pairs to error, as after
//     rdma_disconnect), InjectError (the next completion fails), Fail (one
//     queue pair fails now, as after a device error; its peer is not told),
//     FailLosingCompletions (Fail on a removed device, whose completions
//     not yet polled are lost), Cut (the wire between two endpoints is cut:
//     each side's sends fail, its receives stay quiet).
//
// Timing. In the default, deterministic mode nothing moves until the test
// calls Fabric.Step: each posted request is delivered after a random number
// of steps (up to Options.MaxWireDelay) and its send completion shows up
// after another random delay (up to Options.MaxCompletionDelay), all drawn
// from the seed given to New, so a failing run replays exactly. With
// Options.Auto, a request is delivered as it is posted and its completions
// are visible at once; endpoints are then safe for concurrent use and
// Notify wakes goroutines waiting for completions.
//
// Memory. Bytes written to an endpoint's memory are copied there when that
// endpoint polls its CQ, before the completions that announce them are
// returned (a legal RDMA behaviour: a write is only known to have landed
// once its completion is seen). This keeps every access to an endpoint's
// memory on the goroutine that polls it, so tests stay clean under -race
// provided an endpoint is polled under the same lock as its engine.
// Options.DirectLanding trades that for speed and a stricter check: bytes
// land as they are posted, and -race reports a protocol that reads them
// before their completion.
//
// # Files
//
// Each file uses only the files before it:
//
//   - fifo.go: the queues and the inbound byte FIFO.
//   - fabric.go: the Fabric, Endpoint and CQ types, New and Pair.
//   - memory.go: an endpoint's registered memory, and landing payloads.
//   - cq.go: the CQ that endpoints share.
//   - endpoint.go: an endpoint's own CQ, its completions, its error state.
//   - deliver.go: Step, and delivering work requests at the peer.
//   - post.go: PostSend and PostRecv.
//   - faults.go: Kill, InjectError, Disconnect, Fail, FailLosingCompletions, Cut.
package simfabric
