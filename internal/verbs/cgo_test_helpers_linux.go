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

import (
	"syscall"

	"github.com/rnet-dev/rnet/internal/wr"
)

// cWCStatusStr is ibv_wc_status_str, for the test that checks our own table.
func cWCStatusStr(s wr.WCStatus) string {
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(s)))
}

// cLayout is the layout of shim.h's mirrors of internal/wr's types: sizes
// under the type's name, offsets under "Type.Field". Only tests use it.
func cLayout() map[string]uintptr {
	return map[string]uintptr{
		"Send":                 C.RNET_SIZEOF_SEND_WR,
		"Send.ID":              C.RNET_OFF_SEND_ID,
		"Send.Op":              C.RNET_OFF_SEND_OP,
		"Send.Imm":             C.RNET_OFF_SEND_IMM,
		"Send.Inline":          C.RNET_OFF_SEND_INLINE,
		"Send.Signaled":        C.RNET_OFF_SEND_SIGNALED,
		"Send.NumSGE":          C.RNET_OFF_SEND_NUM_SGE,
		"Send.SGE":             C.RNET_OFF_SEND_SGE,
		"Send.RemoteAddr":      C.RNET_OFF_SEND_REMOTE_ADDR,
		"Send.RKey":            C.RNET_OFF_SEND_RKEY,
		"SGE":                  C.RNET_SIZEOF_SGE,
		"SGE.Addr":             C.RNET_OFF_SGE_ADDR,
		"SGE.Length":           C.RNET_OFF_SGE_LENGTH,
		"SGE.LKey":             C.RNET_OFF_SGE_LKEY,
		"Recv":                 C.RNET_SIZEOF_RECV_WR,
		"Recv.ID":              C.RNET_OFF_RECV_ID,
		"Recv.NumSGE":          C.RNET_OFF_RECV_NUM_SGE,
		"Recv.SGE":             C.RNET_OFF_RECV_SGE,
		"Completion":           C.RNET_SIZEOF_WC,
		"Completion.ID":        C.RNET_OFF_WC_ID,
		"Completion.Status":    C.RNET_OFF_WC_STATUS,
		"Completion.Opcode":    C.RNET_OFF_WC_OPCODE,
		"Completion.Imm":       C.RNET_OFF_WC_IMM,
		"Completion.ByteLen":   C.RNET_OFF_WC_BYTE_LEN,
		"Completion.VendorErr": C.RNET_OFF_WC_VENDOR_ERR,
		"Completion.QPNum":     C.RNET_OFF_WC_QP_NUM,
	}
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
