//go:build linux && cgo

package rnet

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/stream"
)

// testPeekTimeout is the tests' bound on a look, shorter than
// resumePeekTimeout, whose value is not what they check.
const testPeekTimeout = 300 * time.Millisecond

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.AcceptTCP()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// TestPeekResume: the TCP side of a dual listener tells a resume request
// from another protocol's first bytes, even fewer than the magic's, leaves
// those bytes to be read, and gives up on a client that sends nothing (a
// protocol whose server speaks first) or only part of the magic once its
// bound has passed.
func TestPeekResume(t *testing.T) {
	// A case that must end before any bound gets an hour: a look that
	// waited for it would hang the test.
	for _, tc := range []struct {
		name  string
		first []byte
		want  bool
		bound time.Duration
	}{
		{"a resume request", append(resume.TCPMagic[:], 56), true, time.Hour},
		{"HTTP", []byte("GET / HTTP/1.1\r\n"), false, time.Hour},
		{"a short first message", []byte("PING\r\n"), false, time.Hour},
		{"the magic's start, then silence", resume.TCPMagic[:5], false, testPeekTimeout},
		{"silence", nil, false, testPeekTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := tcpPair(t)
			if len(tc.first) > 0 {
				if _, err := c.Write(tc.first); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			if got := peekResume(s, nil, tc.bound); got != tc.want {
				t.Fatalf("peekResume = %t, want %t", got, tc.want)
			}
			if partial := bytes.HasPrefix(resume.TCPMagic[:], tc.first); partial && time.Since(start) < testPeekTimeout {
				t.Errorf("gave up after %v, before resumePeekTimeout", time.Since(start))
			}
			if len(tc.first) == 0 {
				return
			}
			// What was looked at is still there for the reader.
			got := make([]byte, len(tc.first))
			if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, tc.first) {
				t.Fatalf("after the peek, read %q, %v; want %q", got, err, tc.first)
			}
		})
	}
}

// TestPeekResumeEndsWithTheListener: a look at a silent connection ends
// when the listener closes, whatever time it had left (here, an hour: a
// look that missed the close would hang the test).
func TestPeekResumeEndsWithTheListener(t *testing.T) {
	_, s := tcpPair(t)
	done := make(chan struct{})
	result := make(chan bool, 1)
	go func() { result <- peekResume(s, done, time.Hour) }()
	close(done)
	if <-result {
		t.Fatal("peekResume took a silent connection for a resume")
	}
}

// TestDialResumerGenerations: once a TCP attempt has begun a generation,
// a cancelled RDMA attempt's late reply does not replace the token the
// listener gave over TCP; the reply of a path taken is kept whatever its
// generation.
func TestDialResumerGenerations(t *testing.T) {
	r := newDialResumer(settings{}, netip.MustParseAddrPort("10.0.0.2:7471"), netip.Addr{},
		&resumeAgreement{token: resume.Token{1}}, "")
	rdma := r.generation()
	tcp := r.next()
	r.replied(tcp, resume.Reply{Token: resume.Token{3}, Lifetime: time.Second}, r.dialled)
	r.replied(rdma, resume.Reply{Token: resume.Token{2}, Lifetime: time.Second}, netip.MustParseAddrPort("10.1.0.2:7471"))
	if got := r.latest().token; got != (resume.Token{3}) {
		t.Fatalf("after the late RDMA reply the token is %v, want the TCP reply's", got)
	}
	r.adopt(resumedPath{reply: &resume.Reply{Token: resume.Token{2}, Lifetime: time.Second}, to: netip.MustParseAddrPort("10.1.0.2:7471")})
	if got := r.latest(); got.token != (resume.Token{2}) || got.reached != netip.MustParseAddrPort("10.1.0.2:7471") {
		t.Fatalf("after adopting the RDMA path's reply the token is %v from %v, want its, from 10.1.0.2:7471", got.token, got.reached)
	}
}

// TestDialResumerFailedDevices: a resume tries last the device of the path
// that failed in use, and still that one, not the new path's, when it is
// called again because a new path failed before it took over.
func TestDialResumerFailedDevices(t *testing.T) {
	r := newDialResumer(settings{resumeTimeout: 5 * time.Second}, netip.MustParseAddrPort("10.0.0.2:7471"), netip.Addr{},
		&resumeAgreement{token: resume.Token{1}}, "rxe0")
	if r.latest().reached != r.dialled {
		t.Errorf("the dial's reply came from %v, want the address dialled", r.latest().reached)
	}
	if got := r.pathFailed(stream.ResumeRequest{}); len(got) != 1 || got["rxe0"] != 1 {
		t.Fatalf("the first resume tries last %v, want rxe0", got)
	}
	r.moved("rxe1")
	again := stream.ResumeRequest{NewPathErr: errors.New("the new path failed before it took over")}
	if got := r.pathFailed(again); len(got) != 1 || got["rxe0"] != 1 {
		t.Fatalf("called again after the new path on rxe1 failed, it tries last %v, want rxe0 only", got)
	}
	r.moved("rxe1")
	if got := r.pathFailed(stream.ResumeRequest{}); len(got) != 2 || got["rxe1"] != 1 || got["rxe0"] != 2 {
		t.Fatalf("once rxe1's path failed in use too, it tries last %v, want both", got)
	}
}
