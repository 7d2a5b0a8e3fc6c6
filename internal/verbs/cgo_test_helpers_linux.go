//go:build cgo

package verbs

/*
#include <pthread.h>
#include <stdlib.h>
#include "shim.h"

// A completion channel around any fd, for tests of the Go side's lifecycle
// on a machine without RDMA: ibv_destroy_comp_channel takes the context's
// mutex, closes the fd and frees the struct. The context leaks (tests only).
static struct ibv_comp_channel *rnet_fake_comp_channel(int fd)
{
	struct ibv_context *ctx = calloc(1, sizeof *ctx);
	struct ibv_comp_channel *c = calloc(1, sizeof *c);
	if (!ctx || !c) {
		free(ctx);
		free(c);
		return NULL;
	}
	pthread_mutex_init(&ctx->mutex, NULL);
	c->context = ctx;
	c->fd = fd;
	return c;
}
*/
import "C"

import "syscall"

// cWCStatusStr is ibv_wc_status_str, for the test that checks our own table.
func cWCStatusStr(s WCStatus) string {
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(s)))
}

// newFakeCompChannel wraps fd, which it then owns, in a CompChannel whose
// C struct libibverbs never made. Only tests use it.
func newFakeCompChannel(fd int) (*CompChannel, error) {
	c := C.rnet_fake_comp_channel(C.int(fd))
	if c == nil {
		return nil, syscall.ENOMEM
	}
	p, err := NewPollFD(fd, "fake completion channel")
	if err != nil {
		C.ibv_destroy_comp_channel(c)
		return nil, err
	}
	return &CompChannel{c: c, poll: p, dev: "fake", cqs: make(map[C.uintptr_t]*CQ)}, nil
}

// fakeCQHandle is a handle no real CQ has, to stand for one in ch.cqs.
const fakeCQHandle C.uintptr_t = 1
