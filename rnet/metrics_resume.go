package rnet

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/rnet-dev/rnet/internal/stream"
)

// Counting and logging resumes (Config.Resume): each connection that
// agreed to resume tells its Dialer's or ListenConfig's observer of each
// resume that completed and of one that gave up.

// resumeCounts are the process's resume counters (Counters.Resumes and
// the rest), each updated with one atomic operation per resume.
var resumeCounts struct {
	byCause       [len(stream.ResumeStats{}.Resumes)]atomic.Uint64
	failed        atomic.Uint64
	tookNanos     atomic.Int64
	resentInBytes atomic.Uint64
}

// resumeCauseNames are the causes as the metrics and logs name them.
var resumeCauseNames = [len(stream.ResumeStats{}.Resumes)]string{
	stream.CauseCompletion:  "completion_error",
	stream.CauseTransport:   "transport_event",
	stream.CauseKeepalive:   "keepalive",
	stream.CausePeerRequest: "peer_request",
}

func resumeCauseName(k stream.ResumeCause) string {
	if int(k) < len(resumeCauseNames) {
		return resumeCauseNames[k]
	}
	return "unknown"
}

// readResumeCounts is Counters.Resumes: every cause, zero or not.
func readResumeCounts() map[string]uint64 {
	m := make(map[string]uint64, len(resumeCauseNames))
	for k, name := range resumeCauseNames {
		m[name] = resumeCounts.byCause[k].Load()
	}
	return m
}

// resumeObserver counts and logs one connection's resumes; resentBefore
// is what its earlier resumes sent again (the driver reports a total).
// The driver calls it from one resume at a time.
type resumeObserver struct {
	log          *logger
	resentBefore uint64
}

// resumed is stream.Settings.Resumed.
func (o *resumeObserver) resumed(c *stream.Conn, cause stream.ResumeCause, took time.Duration, resentTotal uint64) {
	resent := resentTotal - o.resentBefore
	o.resentBefore = resentTotal
	if int(cause) < len(resumeCounts.byCause) {
		resumeCounts.byCause[cause].Add(1)
	}
	resumeCounts.tookNanos.Add(int64(took))
	resumeCounts.resentInBytes.Add(resent)
	device := connDevice(c)
	connMoved(c, device)
	o.log.resumed(c, device, cause, took, resent)
}

// resumeFailed is stream.Settings.ResumeFailed.
func (o *resumeObserver) resumeFailed(c *stream.Conn, err *stream.ResumeError) {
	resumeCounts.failed.Add(1)
	o.log.resumeFailed(c, err)
}

// The attribute keys of the resume's log records, besides those of
// metrics_log.go.
const (
	logKeyTook   = "took"   // how long a resume took, from the failure
	logKeyResent = "resent" // the bytes a resume sent again
)

// resumed logs a resume that completed, at info level: the stream moved to
// another queue pair, on device now.
func (lg *logger) resumed(c *stream.Conn, device string, cause stream.ResumeCause, took time.Duration, resent uint64) {
	if !lg.enabled(slog.LevelInfo) {
		return
	}
	lg.l.LogAttrs(context.Background(), slog.LevelInfo, "rnet: connection resumed",
		slog.String(logKeyLocal, addrString(c.LocalAddr())),
		slog.String(logKeyRemote, addrString(c.RemoteAddr())),
		slog.String(logKeyDevice, device),
		slog.String(logKeyReason, resumeCauseName(cause)),
		slog.Duration(logKeyTook, took),
		slog.Uint64(logKeyResent, resent))
}

// resumeFailed logs a resume that gave up, at warn level.
func (lg *logger) resumeFailed(c *stream.Conn, err *stream.ResumeError) {
	if !lg.enabled(slog.LevelWarn) {
		return
	}
	lg.l.LogAttrs(context.Background(), slog.LevelWarn, "rnet: resume failed",
		slog.String(logKeyLocal, addrString(c.LocalAddr())),
		slog.String(logKeyRemote, addrString(c.RemoteAddr())),
		slog.Duration(logKeyTook, err.Took),
		slog.String(logKeyError, err.Error()))
}
