//go:build cgo

package cm

/*
#include <stdlib.h>
#include "shim.h"

// A channel struct around any fd, for tests of the Go side's lifecycle on a
// machine without RDMA: rdma_destroy_event_channel only closes the fd and
// frees the struct.
static struct rdma_event_channel *rnet_fake_event_channel(int fd)
{
	struct rdma_event_channel *c = calloc(1, sizeof *c);
	if (c)
		c->fd = fd;
	return c;
}
*/
import "C"

import (
	"syscall"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// newFakeEventChannel wraps fd, which it then owns, in an EventChannel
// whose C struct librdmacm never made. Only tests use it.
func newFakeEventChannel(fd int) (*EventChannel, error) {
	c := C.rnet_fake_event_channel(C.int(fd))
	if c == nil {
		return nil, syscall.ENOMEM
	}
	p, err := verbs.NewPollFD(fd, "fake event channel")
	if err != nil {
		C.rdma_destroy_event_channel(c)
		return nil, err
	}
	return &EventChannel{c: c, poll: p}, nil
}
