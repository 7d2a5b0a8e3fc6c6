//go:build !linux || !cgo

package rnet

import "net"

// Without RDMA there is nothing to resume over TCP.
func (dl *DualListener) takeResumesOverTCP()           {}
func (dl *DualListener) screenTCP(c *net.TCPConn) bool { return false }
