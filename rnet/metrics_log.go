package rnet

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/stream"
)

// The attribute keys of rnet's log records (see Dialer.Logger and
// ListenConfig.Logger). They are stable: programs may filter on them.
const (
	logKeyLocal     = "local"     // this end's address
	logKeyRemote    = "remote"    // the peer's address, or the address dialled
	logKeyListener  = "listener"  // the listener's address
	logKeyDevice    = "device"    // the RDMA device, "" when not known
	logKeyQP        = "qp"        // this end's queue pair number
	logKeyRemoteQP  = "remote_qp" // the peer's queue pair number
	logKeyReason    = "reason"    // a short snake_case cause, as the metrics name it
	logKeyError     = "error"     // the error, as text
	logKeyTransport = "transport" // "rdma" or "tcp"
	logKeyRing      = "ring"      // "send" or "receive"
	logKeySize      = "size"      // a ring's new size, in bytes
)

// logger writes rnet's log records; a nil *logger, for a nil
// *slog.Logger, writes none and costs a nil check.
type logger struct{ l *slog.Logger }

// logFor is the logger for l, nil when l is.
func logFor(l *slog.Logger) *logger {
	if l == nil {
		return nil
	}
	return &logger{l}
}

func (lg *logger) enabled(level slog.Level) bool {
	return lg != nil && lg.l.Enabled(context.Background(), level)
}

// established logs a connection's handshake, at debug level.
func (lg *logger) established(c *Conn, msg string) {
	if !lg.enabled(slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{
		slog.String(logKeyLocal, c.LocalAddr().String()),
		slog.String(logKeyRemote, c.RemoteAddr().String()),
	}
	// Info asks the device: only when the record is written.
	if info, err := c.Info(); err == nil {
		attrs = append(attrs, slog.String(logKeyDevice, info.Device),
			slog.Uint64(logKeyQP, uint64(info.QPNumber)), slog.Uint64(logKeyRemoteQP, uint64(info.RemoteQPNumber)))
	}
	lg.l.LogAttrs(context.Background(), slog.LevelDebug, msg, attrs...)
}

// dialed logs a dial's end: the handshake at debug level, a failure at
// warn (at debug when the caller's context ended it).
func (lg *logger) dialed(c *Conn, address string, err error) {
	if err == nil {
		lg.established(c, "rnet: connection dialled")
		return
	}
	level := slog.LevelWarn
	if errors.Is(err, context.Canceled) {
		level = slog.LevelDebug
	}
	if !lg.enabled(level) {
		return
	}
	lg.l.LogAttrs(context.Background(), level, "rnet: dial failed",
		slog.String(logKeyRemote, address),
		slog.String(logKeyReason, dialFailureReason(err)),
		slog.String(logKeyError, err.Error()))
}

// dialFailureReason names why a dial failed: the reason an rnet listener
// gave in its reject, "rejected" for a reject without one, "timeout",
// "canceled", or "error".
func dialFailureReason(err error) string {
	var pe *peerRejectError
	// The error is the one the caller sees, with rnet's exported types.
	var re *RejectError
	switch {
	case errors.As(err, &pe):
		if f, ok := refusalOf(pe.reason.code); ok {
			return f.String()
		}
		return "rejected"
	case errors.As(err, &re):
		return "rejected"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "error"
}

// refusalOf is the handshake failure a reject code stands for.
func refusalOf(code rejectCode) (handshakeFailure, bool) {
	switch code {
	case rejectBusy:
		return failBusy, true
	case rejectPendingFull:
		return failPendingFull, true
	case rejectBadRequest:
		return failBadRequest, true
	case rejectLockedMemory:
		return failLockedMemory, true
	case rejectResources:
		return failResources, true
	case rejectResumeRefused:
		return failResumeRefused, true
	}
	return 0, false
}

// handshakeFailed logs a connection request a listener refused or
// dropped, at warn level.
func (lg *logger) handshakeFailed(listener, remote net.Addr, device string, f handshakeFailure, err error, refused bool) {
	if !lg.enabled(slog.LevelWarn) {
		return
	}
	msg := "rnet: handshake failed"
	if refused {
		msg = "rnet: connection request refused"
	}
	lg.l.LogAttrs(context.Background(), slog.LevelWarn, msg,
		slog.String(logKeyListener, addrString(listener)),
		slog.String(logKeyRemote, addrString(remote)),
		slog.String(logKeyDevice, device),
		slog.String(logKeyReason, f.String()),
		slog.String(logKeyError, err.Error()))
}

// peerGone logs a connection whose peer vanished, at warn level.
func (lg *logger) peerGone(c *stream.Conn, err error) {
	if !lg.enabled(slog.LevelWarn) {
		return
	}
	lg.l.LogAttrs(context.Background(), slog.LevelWarn, "rnet: peer gone",
		slog.String(logKeyLocal, addrString(c.LocalAddr())),
		slog.String(logKeyRemote, addrString(c.RemoteAddr())),
		slog.String(logKeyDevice, connDevice(c)),
		slog.String(logKeyReason, "peer_gone"),
		slog.String(logKeyError, err.Error()))
}

// ringResizedFunc is stream.Settings.RingResized for lg: nil, so that
// nothing is started for a ring's move, when lg is.
func (lg *logger) ringResizedFunc() func(*stream.Conn, ring.RegionKind, int, error) {
	if lg == nil {
		return nil
	}
	return lg.ringResized
}

// ringResized logs a ring's move to a region of size bytes at debug
// level, and a region that could not be registered at warn.
func (lg *logger) ringResized(c *stream.Conn, kind ring.RegionKind, size int, err error) {
	level, msg := slog.LevelDebug, "rnet: ring resized"
	if err != nil {
		level, msg = slog.LevelWarn, "rnet: ring could not be resized"
	}
	if !lg.enabled(level) {
		return
	}
	attrs := []slog.Attr{
		slog.String(logKeyLocal, addrString(c.LocalAddr())),
		slog.String(logKeyRemote, addrString(c.RemoteAddr())),
		slog.String(logKeyDevice, connDevice(c)),
		slog.String(logKeyRing, kind.String()),
		slog.Int(logKeySize, size),
	}
	if err != nil {
		attrs = append(attrs, slog.String(logKeyError, err.Error()))
	}
	lg.l.LogAttrs(context.Background(), level, msg, attrs...)
}

// fellBack logs a DialConn that connected over TCP, at warn level.
func (lg *logger) fellBack(c *TCPConn, address string) {
	if !lg.enabled(slog.LevelWarn) {
		return
	}
	reason, _ := c.Reason.MarshalText()
	attrs := []slog.Attr{
		slog.String(logKeyTransport, "tcp"),
		slog.String(logKeyLocal, addrString(c.LocalAddr())),
		slog.String(logKeyRemote, address),
		slog.String(logKeyReason, string(reason)),
	}
	if c.Cause != nil {
		attrs = append(attrs, slog.String(logKeyError, c.Cause.Error()))
	}
	lg.l.LogAttrs(context.Background(), slog.LevelWarn, "rnet: connected over TCP instead of RDMA", attrs...)
}

// addrString is a's text, "" for none.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
