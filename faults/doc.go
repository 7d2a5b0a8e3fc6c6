// Package faults holds rnet's fault, hostile-peer, soak and churn suites. It
// has no code of its own: its tests run on a real RDMA device (the Soft-RoCE
// guest of scripts/softroce-vm, or hardware configured as internal/rdmatest
// describes) and check that nothing is lost, nothing leaks and nothing hangs:
//
//   - faults: a peer process killed mid-stream, packet loss and delay on the
//     wire (tc netem), the wire cut (netem loss 100%) for longer than the transport's retry
//     budget, Listener.Close during a burst of connects, and dials that cannot
//     succeed. Each must end the affected connection with a clear error
//     within a bounded time while another connection keeps working.
//   - hostile peers (hostile_test.go): a fake rsocket engine built directly
//     on internal/verbs and internal/cm that breaks the wire protocol on
//     purpose. Each violation must end that connection with a typed error
//     (rnet.ErrProtocol and the specific ring check) and leave the listener
//     and its other connections unharmed.
//   - soak and churn: at least 1 GiB of random-size writes both ways at once,
//     checksummed; the same under packet loss; 1000 connect/close cycles with
//     nothing leaked; 200 connections moving data at once.
//
// Tests that change the lab (netem) restore it with t.Cleanup. Removing
// the RDMA device under traffic (DEVICE_REMOVAL) is destructive, so it lives
// in faults/removal, which the lab runs after every other package.
//
// Knobs: RNET_SOAK_BYTES scales the soak (default 1 GiB); -short shrinks
// every suite.
package faults
