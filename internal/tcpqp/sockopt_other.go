//go:build !linux

package tcpqp

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT is missing: keepalives
// alone then find a vanished peer.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }
