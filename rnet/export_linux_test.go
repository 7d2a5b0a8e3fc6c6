//go:build linux && cgo

package rnet

import (
	"errors"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// registeredAccess returns the access flags of a device connection's memory
// regions as registered: send ring, receive ring, target SGL.
func registeredAccess(c *Conn) (send, recv, target verbs.Access, ok bool) {
	q, ok := c.conn.QueuePair().(*verbsQP)
	if !ok || len(q.mrs) != 3 {
		return 0, 0, 0, false
	}
	return q.mrs[0].Access(), q.mrs[1].Access(), q.mrs[2].Access(), true
}

// failQueuePair moves the queue pair c runs on now to the error state, as
// a path that fails does: every outstanding work request is flushed.
func failQueuePair(c *Conn) error {
	q, ok := c.conn.QueuePair().(*verbsQP)
	if !ok {
		return errors.New("not a device connection")
	}
	return q.qp.SetError()
}
