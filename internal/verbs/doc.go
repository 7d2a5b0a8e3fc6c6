// Package verbs is rnet's cgo binding to libibverbs: devices, protection
// domains, memory regions, completion queues and the posting and polling of
// work requests on queue pairs that internal/cm creates.
//
// Only this package and internal/cm call C. The real code is built with
// `linux && cgo`; everywhere else the constructors return ErrNotSupported so
// that the rest of rnet still compiles and can report why it cannot work.
//
// Rules every type here follows:
//   - Every Close is idempotent, and using an object after Close returns an
//     error wrapping net.ErrClosed instead of touching freed C memory. There
//     are no finalizers: owners close what they create. QP.Step and CQ.Step,
//     the hot path, take no lock: their caller orders them before Close.
//   - Memory handed to the device is mmap'd, never on the Go heap, so the
//     garbage collector can neither move nor free it under the NIC.
//   - Hot paths (PostSend, PostRecv, Poll) cross into C once per batch and do
//     not allocate. CgoCalls counts every crossing for benchmarks.
//   - Goroutines waiting for completions park in the runtime netpoller on a
//     duplicate of the completion channel's fd (see PollFD), so waiting costs
//     no OS thread.
package verbs
