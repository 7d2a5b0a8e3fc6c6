package rnet

import (
	"net"
	"runtime"
	"time"

	"github.com/rnet-dev/rnet/internal/stream"
)

// Per-connection options, named as *net.TCPConn names them, so that code
// that sets them on a TCP connection works on a Conn. A *TCPConn (a
// fallback dial's, or a DualListener's over TCP) has *net.TCPConn's own.

// SetNoDelay turns autocorking off (true) or on (false) for this
// connection, as Config.NoDelay does for new ones. Autocorking holds a
// small Write back while an earlier transfer is in flight, so that a burst
// of small Writes goes out in few transfers, as Nagle's algorithm does for
// TCP; with NoDelay each Write goes out at once, and turning it on sends
// what is held back now. Unlike a *net.TCPConn, which starts with NoDelay
// true, a Conn starts with Config.NoDelay, false by default: autocorking
// costs a request and its response nothing, since a Read about to wait
// sends what is held back.
func (h *Conn) SetNoDelay(noDelay bool) error {
	err := h.conn.SetAutocork(!noDelay)
	runtime.KeepAlive(h)
	return err
}

// SetKeepAlive turns keepalives on or off for this connection. On, the
// connection probes its peer every keepalive period (Config.KeepAlive, the
// last SetKeepAlivePeriod, or 15 s) with a zero-byte RDMA write, and a
// peer that leaves sends unacknowledged for three periods is declared gone
// (ErrPeerGone), as TCP's keepalive probes find a dead peer. Off, a
// vanished peer shows only when a transfer to it fails, which on some
// devices (rxe) is never.
func (h *Conn) SetKeepAlive(keepalive bool) error {
	err := h.conn.SetKeepAlive(keepalive)
	runtime.KeepAlive(h)
	return err
}

// SetKeepAlivePeriod sets the period between keepalives, rounded up to a
// whole second, and turns keepalives on; 0 means the default, 15 s. A
// Conn probes at the period whether or not it is idle, so there is no
// separate idle time as TCP has.
func (h *Conn) SetKeepAlivePeriod(d time.Duration) error {
	if d < 0 {
		return &net.OpError{Op: "set", Net: "rdma", Source: h.LocalAddr(), Addr: h.RemoteAddr(),
			Err: &ConfigError{Field: "KeepAlive", Value: d, Want: "0 (the default) or positive"}}
	}
	if d == 0 {
		d = stream.DefaultKeepAlive
	}
	err := h.conn.SetKeepAlivePeriod((d + time.Second - 1).Truncate(time.Second))
	runtime.KeepAlive(h)
	return err
}

// SetLinger sets what Close does with written data the peer has not taken
// yet, as *net.TCPConn's SetLinger does. sec > 0: Close waits up to sec
// seconds for the peer to take it, then drops the rest (the peer sees
// ErrPeerGone, Close returns ErrAborted). sec == 0: Close drops it at once
// (Config().Linger then shows -1, as a Config that asks for that does).
// sec < 0: the Config.Linger the connection started with (10 s by default)
// applies again. Unlike TCP's, Close never returns with data still going
// out in the background: what was not sent by then is dropped.
func (h *Conn) SetLinger(sec int) error {
	err := h.conn.SetLinger(sec)
	runtime.KeepAlive(h)
	return err
}
