// Package twohosts is the two-host tier: rnet between two kernels (the
// lab's host A and host B, internal/hostlab), and what becomes of its
// connections when a host loses power, freezes, reboots or loses its wire.
//
// Its tests run on the machine that boots the lab, with RNET_HOSTS=1 (make
// test-hosts); each starts this package's test binary on the hosts, in one
// of two forms: a role (a program such as a checked-stream server, picked by
// RNET_TWOHOSTS_ROLE before any test runs) or a guest test (a test function
// that runs only on a host, picked by -test.run, with RNET_TWOHOSTS_GUEST=1).
package twohosts
