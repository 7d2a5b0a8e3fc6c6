package ring_test

import (
	"bytes"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
)

// corkPair connects two sides on a fabric where nothing moves until Step,
// so a posted transfer stays in flight for as long as a test wants.
func corkPair(t *testing.T, cfg ring.Config) (*simfabric.Fabric, *side, *side) {
	t.Helper()
	f := simfabric.New(1, simfabric.Options{})
	a, b := connect(t, f, cfg, cfg)
	settle(t, a, b)
	return f, a, b
}

// writeAll writes p on s in one Write and services s once, as the driver
// does after a Write.
func writeAll(t *testing.T, s *side, p []byte) {
	t.Helper()
	n, err := s.eng.Write(p)
	if err != nil || n != len(p) {
		t.Fatalf("%s: Write = %d, %v; want %d", s.name, n, err, len(p))
	}
	if _, err := s.service(len(s.wcs)); err != nil {
		t.Fatal(err)
	}
}

// stepAll runs the fabric and both driver loops until nothing moves.
func stepAll(t *testing.T, f *simfabric.Fabric, sides ...*side) {
	t.Helper()
	for i := 0; ; i++ {
		settle(t, sides...)
		if !f.Step() {
			settle(t, sides...)
			return
		}
		if i > 100000 {
			t.Fatal("fabric never settles")
		}
	}
}

// readExactly reads len(want) bytes on s and checks them.
func readExactly(t *testing.T, f *simfabric.Fabric, s *side, want []byte, others ...*side) {
	t.Helper()
	got := make([]byte, 0, len(want))
	buf := make([]byte, 4096)
	for i := 0; len(got) < len(want); i++ {
		n, err := s.eng.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
		if n == 0 {
			if i > 100000 {
				t.Fatalf("read %d of %d bytes", len(got), len(want))
			}
			stepAll(t, f, append(others, s)...)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read bytes differ from written ones (%d bytes)", len(want))
	}
}

// message is the i'th 64-byte write of a test, every byte telling its
// place in the stream.
func message(i int) []byte {
	b := make([]byte, 64)
	for j := range b {
		b[j] = pattern(uint64(i*64+j), 29)
	}
	return b
}

// TestAutocorkCoalesces: the first small write on an idle connection goes
// out at once; the writes made while it is in flight wait and go out as one
// transfer when its completion comes. Without Autocork each is a transfer.
func TestAutocorkCoalesces(t *testing.T) {
	for _, cork := range []bool{true, false} {
		f, a, b := corkPair(t, ring.Config{Autocork: cork})
		var all []byte
		for i := range 10 {
			m := message(i)
			all = append(all, m...)
			writeAll(t, a, m)
			if i == 0 && a.eng.Stats().MessagesSent != 1 {
				t.Fatalf("autocork %v: the write on an idle connection was not posted at once", cork)
			}
		}
		s := a.eng.Stats()
		wantSent, wantCoalesced := uint64(1), uint64(8)
		if !cork {
			wantSent, wantCoalesced = 10, 0
		}
		if s.MessagesSent != wantSent || s.CoalescedWrites != wantCoalesced || a.eng.Corked() != cork {
			t.Fatalf("autocork %v: %d transfers, %d coalesced writes, corked %v; want %d, %d",
				cork, s.MessagesSent, s.CoalescedWrites, a.eng.Corked(), wantSent, wantCoalesced)
		}
		if cork && !a.eng.Blocked() {
			t.Fatal("corked bytes are not reported by Blocked: a driver could strand them")
		}
		// The completion of the first transfer releases the rest, as one.
		readExactly(t, f, b, all, a)
		if s := a.eng.Stats(); cork && s.MessagesSent != 2 {
			t.Fatalf("%d transfers for 10 writes, want 2", s.MessagesSent)
		}
		if a.eng.Corked() || a.eng.Blocked() {
			t.Fatal("bytes left behind after the completion")
		}
		// Idle again: the next write goes out at once.
		before := a.eng.Stats().MessagesSent
		writeAll(t, a, message(10))
		if a.eng.Stats().MessagesSent != before+1 {
			t.Fatalf("autocork %v: a write on an idle connection waited", cork)
		}
		readExactly(t, f, b, message(10), a)
		a.check(t)
		b.check(t)
	}
}

// TestAutocorkUncork: Uncork posts the corked bytes in the next PostSends,
// without waiting for the completion.
func TestAutocorkUncork(t *testing.T) {
	f, a, b := corkPair(t, ring.Config{Autocork: true})
	writeAll(t, a, message(0))
	writeAll(t, a, message(1))
	writeAll(t, a, message(2))
	if !a.eng.Corked() {
		t.Fatal("second and third writes not corked")
	}
	a.eng.Uncork()
	if _, err := a.service(0); err != nil {
		t.Fatal(err)
	}
	if s := a.eng.Stats(); s.MessagesSent != 2 || a.eng.Corked() {
		t.Fatalf("after Uncork: %d transfers, corked %v; want 2, false", s.MessagesSent, a.eng.Corked())
	}
	// One Uncork is one flush: later writes cork again.
	writeAll(t, a, message(3))
	if !a.eng.Corked() {
		t.Fatal("a write after the flush was not corked")
	}
	readExactly(t, f, b, append(append(append(message(0), message(1)...), message(2)...), message(3)...), a)
}

// TestAutocorkCloseFlushes: CloseWrite and Close post corked bytes at
// once, then the close message.
func TestAutocorkCloseFlushes(t *testing.T) {
	for _, closeWrite := range []bool{true, false} {
		f, a, b := corkPair(t, ring.Config{Autocork: true})
		writeAll(t, a, message(0))
		writeAll(t, a, message(1))
		if !a.eng.Corked() {
			t.Fatal("second write not corked")
		}
		if closeWrite {
			a.eng.CloseWrite()
		} else {
			a.eng.Close()
		}
		if a.eng.Corked() {
			t.Fatal("corked bytes held back behind a close")
		}
		if _, err := a.service(0); err != nil {
			t.Fatal(err)
		}
		if s := a.eng.Stats(); s.MessagesSent != 2 {
			t.Fatalf("close posted %d transfers, want 2", s.MessagesSent)
		}
		stepAll(t, f, a, b)
		want := append(message(0), message(1)...)
		if got := readAll(t, b, a); !bytes.Equal(got, want) {
			t.Fatalf("close: read %d bytes, want %d", len(got), len(want))
		}
	}
}

// TestAutocorkThreshold: corked bytes go out without the completion once
// they fill half the ring (a 16 KiB idle ring corks at most 8 KiB), and a
// full ring never corks.
func TestAutocorkThreshold(t *testing.T) {
	f, a, b := corkPair(t, ring.Config{Autocork: true, SendBufferSize: 16 << 10, RecvBufferSize: 64 << 10,
		IdleBufferSize: ring.MaxBufSize})
	var all []byte
	i := 0
	for ; a.eng.Stats().MessagesSent < 2; i++ {
		if i > (8<<10)/64+1 {
			t.Fatalf("%d corked bytes still held back", a.eng.Stats().BytesWritten-a.eng.Stats().BytesSent)
		}
		m := message(i)
		all = append(all, m...)
		writeAll(t, a, m)
	}
	if s := a.eng.Stats(); s.BytesSent != s.BytesWritten || s.BytesSent != 64+8<<10 {
		t.Fatalf("sent %d of %d written bytes, want %d", s.BytesSent, s.BytesWritten, 64+8<<10)
	}
	readExactly(t, f, b, all, a)
	a.check(t)
}

// TestAutocorkNeverStranded: with completions arriving in random order
// relative to writes, a writer that writes and then only services its
// engine while Blocked says so gets every byte to the reader.
func TestAutocorkNeverStranded(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		f := simfabric.New(seed, simfabric.Options{MaxWireDelay: 3, MaxCompletionDelay: 5})
		cfg := ring.Config{Autocork: true, SendBufferSize: 4096, IdleBufferSize: 1024}
		a, b := connect(t, f, cfg, cfg)
		var all []byte
		for i := range 200 {
			m := message(i)[:1+int(seed+uint64(i))%64]
			all = append(all, m...)
			for len(m) > 0 {
				n, err := a.eng.Write(m)
				if err != nil {
					t.Fatal(err)
				}
				m = m[n:]
				if _, err := a.service(len(a.wcs)); err != nil {
					t.Fatal(err)
				}
				if len(m) > 0 || i%7 == 0 {
					// A full ring: let the reader make room.
					settle(t, b)
					f.Step()
				}
			}
		}
		// Only Blocked keeps the writer's driver polling now.
		got := make([]byte, 0, len(all))
		buf := make([]byte, 512)
		for idle := 0; len(got) < len(all); {
			n, err := b.eng.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, buf[:n]...)
			if _, err := b.service(len(b.wcs)); err != nil {
				t.Fatal(err)
			}
			if a.eng.Blocked() {
				if _, err := a.service(len(a.wcs)); err != nil {
					t.Fatal(err)
				}
			}
			moved := f.Step()
			if n > 0 || moved {
				idle = 0
			} else if idle++; idle > 1000 {
				t.Fatalf("seed %d: stranded at %d of %d bytes; corked %v", seed, len(got), len(all), a.eng.Corked())
			}
		}
		if !bytes.Equal(got, all) {
			t.Fatalf("seed %d: bytes differ", seed)
		}
		if s := a.eng.Stats(); s.MessagesSent >= 200 {
			t.Fatalf("seed %d: %d transfers for 200 writes: nothing coalesced", seed, s.MessagesSent)
		}
		a.check(t)
		b.check(t)
	}
}
