package ring_test

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
)

// Receives that DATA messages used may wait for the driver's next crossing
// (RepostDue false, and Blocked false, so nobody polls just for them) until
// a quarter of the spare receives are used or a credit update is due.
func TestRepostDue(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{})
	fixed := ring.Config{IdleBufferSize: ring.MaxBufSize} // halves of the default size
	w, rd := connect(t, f, fixed, fixed)
	deliver := func() {
		t.Helper()
		if _, err := w.service(len(w.wcs)); err != nil {
			t.Fatal(err)
		}
		for f.Pending() {
			f.Step()
		}
		// The reader polls and completes, but posts nothing.
		n := rd.ep.PollCQ(rd.wcs)
		if err := rd.eng.Complete(rd.wcs[:n]); err != nil {
			t.Fatal(err)
		}
	}
	// Settle the handshake's credit updates with both sides serviced
	// in full.
	for range 8 {
		for _, s := range []*side{w, rd} {
			if _, err := s.service(len(s.wcs)); err != nil {
				t.Fatal(err)
			}
		}
		for f.Pending() {
			f.Step()
		}
	}
	if rd.eng.RepostDue() || rd.eng.Blocked() {
		t.Fatal("a settled connection has receives to repost")
	}
	for i := 1; i <= ring.RecvHeadroom/4; i++ {
		if _, err := w.eng.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		deliver()
		want := i == ring.RecvHeadroom/4
		if got := rd.eng.RepostDue(); got != want {
			t.Fatalf("after %d messages RepostDue = %v, want %v", i, got, want)
		}
		if got := rd.eng.Blocked(); got != want {
			t.Fatalf("after %d messages Blocked = %v, want %v", i, got, want)
		}
	}
	rd.recvs = rd.eng.PostRecvs(rd.recvs[:0])
	if err := rd.ep.PostRecv(rd.recvs); err != nil {
		t.Fatal(err)
	}
	if len(rd.recvs) != ring.RecvHeadroom/4 || rd.eng.RepostDue() {
		t.Fatalf("reposted %d receives, RepostDue %v", len(rd.recvs), rd.eng.RepostDue())
	}

	// One message, then reading half of rbuf makes a credit update due,
	// which waits for the receive: it must go back now.
	half := ring.Config{}.Normalize().RecvBufferSize / 2
	if n, err := w.eng.Write(make([]byte, half-ring.RecvHeadroom/4)); err != nil || n != half-ring.RecvHeadroom/4 {
		t.Fatal(n, err)
	}
	deliver()
	if rd.eng.RepostDue() {
		t.Fatal("RepostDue before the bytes were read")
	}
	buf := make([]byte, half)
	for read := 0; read < half; {
		n, err := rd.eng.Read(buf)
		if err != nil || n == 0 {
			t.Fatalf("read %d of %d: %d, %v", read, half, n, err)
		}
		read += n
		if read < half {
			deliver()
		}
	}
	if !rd.eng.RepostDue() || !rd.eng.Blocked() {
		t.Fatalf("half of rbuf read with receives to repost: RepostDue %v, Blocked %v", rd.eng.RepostDue(), rd.eng.Blocked())
	}
}
