package stream

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Settings.Resumed hears each resume that completed, with its cause, and
// Settings.ResumeFailed each one that gave up, with the error the
// connection then fails with; each once, on the resume's own goroutine.
func TestResumeObserved(t *testing.T) {
	type heard struct {
		resumed, failed atomic.Int32
		cause           atomic.Int32
		err             atomic.Pointer[ResumeError]
	}
	var ha, hb heard
	rc := resumePipe(t, func(s *Settings) { s.ResumeTimeout = 200 * time.Millisecond })
	observe := func(c *Conn, h *heard) {
		c.mu.Lock()
		c.set.Resumed = func(_ *Conn, cause ResumeCause, _ time.Duration, _ uint64) {
			h.cause.Store(int32(cause))
			h.resumed.Add(1)
		}
		c.set.ResumeFailed = func(_ *Conn, err *ResumeError) {
			h.err.Store(err)
			h.failed.Add(1)
		}
		c.mu.Unlock()
	}
	observe(rc.a, &ha)
	observe(rc.b, &hb)

	endpointOf(rc.a).Endpoint().Fail(wr.WCRetryExcErr)
	rc.a.Drive() // as the tick would
	conntest.Until(t, "both ends resumed", func() bool { return ha.resumed.Load() == 1 && hb.resumed.Load() == 1 })
	if got := ResumeCause(ha.cause.Load()); got != CauseCompletion {
		t.Errorf("the failed end's resume heard with cause %v, want %v", got, CauseCompletion)
	}

	// The next failure finds no path: it gives up.
	rc.ra.hold = make(chan struct{})
	rc.rb.hold = rc.ra.hold
	failIdle(rc.a)
	_, err := rc.a.Read(make([]byte, 1))
	conntest.Until(t, "the failure heard", func() bool { return ha.failed.Load() == 1 })
	var re *ResumeError
	if !errors.As(err, &re) || ha.err.Load() != re {
		t.Errorf("ResumeFailed heard %v; Read failed with %v: want the same ResumeError", ha.err.Load(), err)
	}
	rc.close()
	if ha.resumed.Load() != 1 || ha.failed.Load() != 1 {
		t.Errorf("heard %d resumes and %d failures, want one each", ha.resumed.Load(), ha.failed.Load())
	}
}
