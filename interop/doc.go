// Package interop holds the tests that prove rnet speaks C rsocket's wire
// protocol: librdmacm's rstream (client and server), and libc programs (curl,
// socat) run under LD_PRELOAD=librspreload.so, against rnet in both
// directions, on Soft-RoCE (rxe) and, where the lab provides it, siw.
//
// The package has no code of its own; its tests import internal/rdmatest,
// so `make test` runs them in the device tier:
//
//	go test -race -count=1 -exec "$PWD/scripts/softroce-vm" ./interop/
//
// Outside the lab they skip (they fail under RNET_REQUIRE_RDMA=1).
package interop
