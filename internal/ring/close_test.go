package ring_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/wr"
)

// settle runs both driver loops until nothing moves.
func settle(t *testing.T, sides ...*side) {
	t.Helper()
	for moved := true; moved; {
		moved = false
		for _, s := range sides {
			m, err := s.service(len(s.wcs))
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			moved = moved || m
		}
	}
}

// readAll reads until EOF, running the driver loops in between.
func readAll(t *testing.T, r *side, others ...*side) []byte {
	t.Helper()
	var out bytes.Buffer
	buf := make([]byte, 3000)
	for i := 0; ; i++ {
		n, err := r.eng.Read(buf)
		out.Write(buf[:n])
		if err == io.EOF {
			return out.Bytes()
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			if i > 1e6 {
				t.Fatal("no EOF")
			}
			settle(t, append(others, r)...)
		}
	}
}

// transfer writes p on w while r reads it, and checks what r got.
func transfer(t *testing.T, w, r *side, p []byte) {
	t.Helper()
	var got []byte
	buf := make([]byte, 3000)
	for rest := p; len(rest) > 0 || len(got) < len(p); {
		n, err := w.eng.Write(rest)
		if err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
		settle(t, w, r)
		k, err := r.eng.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:k]...)
		if n == 0 && k == 0 {
			settle(t, w, r)
		}
	}
	if !bytes.Equal(got, p) {
		t.Fatalf("transfer: got %d bytes, want %d", len(got), len(p))
	}
}

func newAutoPair(t *testing.T, cfg ring.Config) (*simfabric.Fabric, *side, *side) {
	f := simfabric.New(1, simfabric.Options{Auto: true})
	a, b := connect(t, f, cfg, cfg)
	return f, a, b
}

// TestCloseWriteHalfClose: like TCP's shutdown(SHUT_WR), the peer reads
// everything then EOF and can still answer; its own CloseWrite becomes a
// DISCONNECT because our side is no longer writable (rsocket's rule).
func TestCloseWriteHalfClose(t *testing.T) {
	f, a, b := newAutoPair(t, ring.Config{SendBufferSize: 4096, RecvBufferSize: 4096})
	req := bytes.Repeat([]byte("request "), 2000)
	transfer(t, a, b, req)
	a.eng.CloseWrite()
	if _, err := a.eng.Write([]byte("x")); !errors.Is(err, ring.ErrWriteClosed) {
		t.Fatal(err)
	}
	if got := readAll(t, b, a); len(got) != 0 {
		t.Fatalf("got %d more bytes", len(got))
	}
	if !b.eng.PeerClosedWrite() || b.eng.PeerDisconnected() {
		t.Fatal("b's view of a")
	}
	resp := bytes.Repeat([]byte("response "), 1000)
	transfer(t, b, a, resp)
	b.eng.CloseWrite()
	if got := readAll(t, a, b); len(got) != 0 {
		t.Fatalf("got %d more bytes", len(got))
	}
	settle(t, a, b)
	if !a.eng.PeerDisconnected() {
		t.Fatal("b's CloseWrite after a's should be a DISCONNECT")
	}
	for _, s := range []*side{a, b} {
		if !s.eng.Finished() || !s.eng.Flushed() || s.eng.Err() != nil {
			t.Fatalf("%s: finished %v flushed %v err %v", s.name, s.eng.Finished(), s.eng.Flushed(), s.eng.Err())
		}
	}
	if st := f.Stats(); st.Errors != 0 || st.RNR != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestCloseFlushesFirst: Close right after a large write still delivers
// every byte before the peer sees EOF (nettest's BasicIO).
func TestCloseFlushesFirst(t *testing.T) {
	_, a, b := newAutoPair(t, ring.Config{SendBufferSize: 8192, RecvBufferSize: 4096})
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	n, err := a.eng.Write(data)
	if err != nil || n != 8192 {
		t.Fatal(n, err)
	}
	a.eng.Close()
	if a.eng.Flushed() {
		t.Fatal("flushed with data queued")
	}
	if _, err := a.eng.Read(make([]byte, 1)); !errors.Is(err, ring.ErrClosed) {
		t.Fatal(err)
	}
	if got := readAll(t, b, a); !bytes.Equal(got, data[:n]) {
		t.Fatalf("got %d bytes", len(got))
	}
	settle(t, a, b)
	if !a.eng.Finished() || !a.eng.Flushed() || !b.eng.PeerDisconnected() {
		t.Fatal("not closed")
	}
	if _, err := b.eng.Write([]byte("late")); !errors.Is(err, ring.ErrPeerDisconnected) {
		t.Fatal(err)
	}
	// The driver now disconnects; the flushes are not errors.
	a.ep.Disconnect()
	settle(t, a, b)
	if a.eng.Err() != nil || b.eng.Err() != nil {
		t.Fatal(a.eng.Err(), b.eng.Err())
	}
}

// TestAbort: with the peer not reading, credits run out; Abort drops the
// unsent data and fails the engine instead of saying DISCONNECT, so the peer
// cannot take the prefix it got for the whole stream.
func TestAbort(t *testing.T) {
	_, a, b := newAutoPair(t, ring.Config{SendBufferSize: 64 << 10, RecvBufferSize: 4096, RecvQueueSize: 16})
	n, _ := a.eng.Write(make([]byte, 64<<10))
	settle(t, a, b)
	if a.eng.Flushed() {
		t.Fatal("flushed although the peer cannot take it all")
	}
	a.eng.Close()
	settle(t, a, b)
	if a.eng.Finished() {
		t.Fatal("Close should wait for the data")
	}
	dropped := a.eng.Abort()
	if dropped == 0 || dropped >= uint64(n) {
		t.Fatalf("Abort dropped %d of %d bytes", dropped, n)
	}
	if !errors.Is(a.eng.Err(), ring.ErrAborted) {
		t.Fatalf("engine error after Abort: %v", a.eng.Err())
	}
	if wrs := a.eng.PostSends(nil); len(wrs) != 0 {
		t.Fatalf("Abort still sends: %+v", wrs)
	}
	if !a.eng.Finished() || !a.eng.Flushed() {
		t.Fatal("Abort did not finish")
	}
	settle(t, b)
	got, buf := 0, make([]byte, 3000)
	for {
		k, err := b.eng.Read(buf)
		if err != nil {
			t.Fatalf("peer's Read: %v", err)
		}
		if k == 0 {
			break
		}
		got += k
		settle(t, b)
	}
	if uint64(got) != uint64(n)-dropped {
		t.Fatalf("peer got %d bytes, want the %d sent", got, uint64(n)-dropped)
	}
	if b.eng.PeerDisconnected() || b.eng.Finished() {
		t.Fatal("the peer saw an orderly end of a truncated stream")
	}
}

// TestAbortWithNothingUnsent is Close: the peer reads everything, then EOF.
func TestAbortWithNothingUnsent(t *testing.T) {
	_, a, b := newAutoPair(t, ring.Config{})
	transfer(t, a, b, []byte("all of it"))
	if dropped := a.eng.Abort(); dropped != 0 {
		t.Fatalf("Abort dropped %d bytes", dropped)
	}
	if got := readAll(t, b, a); len(got) != 0 {
		t.Fatalf("got %d more bytes", len(got))
	}
	if !b.eng.PeerDisconnected() || a.eng.Err() != nil {
		t.Fatal(b.eng.PeerDisconnected(), a.eng.Err())
	}
}

func TestKeepalive(t *testing.T) {
	_, a, b := newAutoPair(t, ring.Config{})
	settle(t, a, b)
	recvsBefore := b.ep.QueuedRecvs()
	a.eng.Keepalive()
	wrs := a.eng.PostSends(nil)
	if len(wrs) != 1 || wrs[0].Op != wr.OpWrite || wrs[0].NumSGE != 0 || !wrs[0].Signaled {
		t.Fatalf("%+v", wrs)
	}
	if err := a.ep.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	settle(t, a, b)
	if b.ep.QueuedRecvs() != recvsBefore || b.eng.Stats().RecvCompletions != a.eng.Stats().CreditUpdatesSent {
		t.Fatal("the peer saw the keepalive")
	}
	if !a.eng.Flushed() || a.eng.Stats().KeepalivesSent != 1 {
		t.Fatal("keepalive not completed")
	}
	// Not while other work is outstanding.
	a.eng.Write([]byte("x"))
	a.eng.Keepalive()
	if wrs := a.eng.PostSends(nil); len(wrs) != 1 || wrs[0].Op != wr.OpWriteImm {
		t.Fatalf("%+v", wrs)
	}
}
