package rnet

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/stream"
)

// TestResumeCountedAndLogged: each resume a connection reports is counted
// by cause, with its time and the bytes it alone sent again, logged at info
// level with the device it moved to, and moves the connection's
// open-connection gauge to that device until Close; a resume that gave up
// is counted and logged as a warning.
func TestResumeCountedAndLogged(t *testing.T) {
	var recs records
	lg := slog.New(&recs)
	a, b := simPairLogged(t, lg)
	defer b.Close()
	before := ReadMetrics()
	o := &resumeObserver{log: logFor(lg)}
	o.resumed(a.conn, stream.CauseKeepalive, 120*time.Millisecond, 4096)
	o.resumed(a.conn, stream.CauseCompletion, 80*time.Millisecond, 6000)
	after := ReadMetrics()
	for cause, want := range map[string]uint64{"keepalive": 1, "completion_error": 1, "transport_event": 0, "peer_request": 0} {
		if got := after.Counters.Resumes[cause] - before.Counters.Resumes[cause]; got != want {
			t.Errorf("Resumes[%q] grew by %d, want %d", cause, got, want)
		}
	}
	if got := after.Counters.ResumeTime - before.Counters.ResumeTime; got != 200*time.Millisecond {
		t.Errorf("ResumeTime grew by %v, want 200ms", got)
	}
	if got := after.Counters.BytesResent - before.Counters.BytesResent; got != 6000 {
		t.Errorf("BytesResent grew by %d, want 6000: each resume's own bytes", got)
	}
	logged := recs.all("rnet: connection resumed")
	if len(logged) != 2 {
		t.Fatalf("%d resumes logged, want 2", len(logged))
	}
	if l := logged[1]; l["reason"] != "completion_error" || l["took"] != "80ms" || l["resent"] != "1904" ||
		l["device"] != "simulated" || l["local"] != "10.0.0.1:40000" || l["remote"] != "10.0.0.2:7471" {
		t.Errorf("the second resume logged as %v", l)
	}
	if _, level, _ := recs.find("rnet: connection resumed"); level != slog.LevelInfo {
		t.Errorf("a resume logged at %v, want info", level)
	}

	// A resume onto another device moves the gauge, and a second one
	// moves it again, off the first; Close takes it from the last. The
	// devices are this test's own: the simulated gauge is every test's.
	connMoved(a.conn, "rxe-moved")
	if got := openCount(ReadMetrics(), "rdma", "rxe-moved"); got != 1 {
		t.Errorf("open connections on the device resumed to = %d, want 1", got)
	}
	connMoved(a.conn, "rxe-moved-again")
	moved := ReadMetrics()
	if got := openCount(moved, "rdma", "rxe-moved"); got != 0 {
		t.Errorf("open connections on the device resumed from = %d, want 0", got)
	}
	if got := openCount(moved, "rdma", "rxe-moved-again"); got != 1 {
		t.Errorf("open connections on the device resumed to = %d, want 1", got)
	}
	a.Close()
	if got := openCount(ReadMetrics(), "rdma", "rxe-moved-again"); got != 0 {
		t.Errorf("open connections on the device resumed to = %d after Close, want 0", got)
	}
	connMoved(a.conn, "rxe-late") // a resume reported after Close moves nothing
	if got := openCount(ReadMetrics(), "rdma", "rxe-late"); got != 0 {
		t.Errorf("a closed connection counted as open on rxe-late: %d", got)
	}

	o.resumeFailed(b.conn, &stream.ResumeError{Cause: errors.New("retries exceeded"), Err: errors.New("no route"), Took: time.Second})
	if got := ReadMetrics().Counters.ResumeFailures - before.Counters.ResumeFailures; got != 1 {
		t.Errorf("ResumeFailures grew by %d, want 1", got)
	}
	l, level, ok := recs.find("rnet: resume failed")
	if !ok || level != slog.LevelWarn || l["took"] != "1s" || l["error"] == "" {
		t.Errorf("a failed resume logged as %v at %v (found %t), want a warning with its time and error", l, level, ok)
	}
}
