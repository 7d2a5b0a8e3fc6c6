package rnet

import (
	"fmt"
	"strings"
	"time"
)

// resumeSteps times a resume handshake at the listener, from the moment its
// request was read, so that the error of one that failed says where its
// time went: a dialer gives up on an answer after a few seconds, and a
// listener under many resumes at once may spend them waiting for the
// connection's own Resume call, building the queue pair, or for the RTU.
type resumeSteps struct {
	began time.Time
	marks []handshakeMark
}

type handshakeMark struct {
	name string
	at   time.Duration
}

func startResumeSteps() *resumeSteps { return &resumeSteps{began: time.Now()} }

// mark records that the step name has just ended.
func (s *resumeSteps) mark(name string) {
	s.marks = append(s.marks, handshakeMark{name, time.Since(s.began)})
}

// wrap adds the steps to err, which it still matches (errors.Is, As).
func (s *resumeSteps) wrap(err error) error {
	return fmt.Errorf("%w (%s)", err, s)
}

// String lists the steps ended and when, then how long the handshake has
// run: "request read; path free at 2ms; ... now 4.1s".
func (s *resumeSteps) String() string {
	var b strings.Builder
	b.WriteString("handshake: request read")
	for _, m := range s.marks {
		fmt.Fprintf(&b, "; %s at %v", m.name, m.at.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "; failed at %v", time.Since(s.began).Round(time.Millisecond))
	return b.String()
}
