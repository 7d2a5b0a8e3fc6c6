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
//
// # Files
//
// Each file uses only the files before it (on other platforms, stub.go
// stands for the _linux ones):
//
//   - counter.go: CgoCalls, the count of crossings into C.
//   - errors.go: the errors.
//   - types.go: device, port, access and queue pair descriptions.
//   - wr.go: the work request and completion types of internal/wr.
//   - step.go: StepFlags and the order Step posts in.
//   - pollfd.go: PollFD, a wait for an fd in the netpoller.
//   - channelclose.go: the Close that completion and event channels share.
//   - memlock_limit_linux.go: LockedMemoryLimit, RLIMIT_MEMLOCK and the
//     exemption from it.
//   - memlock_linux.go: the locked-memory limit behind a failed registration.
//   - resources.go: Resources, what the process holds on its devices.
//   - shim_linux.go: handles and errnos at the crossing into shim.h.
//   - device_linux.go: Devices, and what a device reports of itself.
//   - context_linux.go: Context, an open device.
//   - async_linux.go: the device's asynchronous events.
//   - pd_linux.go: PD, a protection domain.
//   - ringmem_linux.go: the memory of registered regions, outside the Go
//     heap and x/sys's mapping table.
//   - mr_linux.go: MR, registered memory.
//   - channel_linux.go: CompChannel and the CQ type (each names the other).
//   - cq_linux.go: the CQ's methods.
//   - cgo_test_helpers_linux.go: C the tests call (test files cannot use cgo).
//   - srq_linux.go: SRQ, a shared receive queue.
//   - qp_linux.go: QP, a queue pair created by internal/cm.
//   - post_linux.go: posting and Step, the hot path.
package verbs
