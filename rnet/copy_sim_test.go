package rnet

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// copyChunk is what one op of the io.Copy benchmarks moves.
const copyChunk = 1 << 20

// BenchmarkSimCopyFileToConn: io.Copy from a 1 MiB file into a Conn, the
// peer draining it with plain Reads. With Conn.ReadFrom the file is read
// straight into the send ring; without, io.Copy reads it into a 32 KiB
// buffer it allocates per call, and Write copies that in.
//
//	go test -run '^$' -bench 'SimCopy' -benchmem ./rnet
func BenchmarkSimCopyFileToConn(b *testing.B) {
	path := filepath.Join(b.TempDir(), "src")
	if err := os.WriteFile(path, make([]byte, copyChunk), 0o600); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	c, s := simPipe(b, nil)
	defer c.Close()
	drained := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := s.Read(buf); err != nil {
				if err == io.EOF {
					err = nil
				}
				drained <- err
				return
			}
		}
	}()
	b.SetBytes(copyChunk)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(c, f); err != nil || n != copyChunk {
			b.Fatalf("io.Copy = %d, %v", n, err)
		}
	}
	c.CloseWrite()
	if err := <-drained; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	s.Close()
}

// BenchmarkSimCopyConnToDiscard: io.Copy from a Conn into io.Discard of
// what the peer writes, 1 MiB an op. With Conn.WriteTo the bytes are handed
// to the writer from the receive ring; without, io.Discard's ReadFrom
// reads them through an 8 KiB buffer.
func BenchmarkSimCopyConnToDiscard(b *testing.B) {
	c, s := simPipe(b, nil)
	defer s.Close()
	wrote := make(chan error, 1)
	src := make([]byte, copyChunk)
	b.SetBytes(copyChunk)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for range b.N {
			if _, err := s.Write(src); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- s.CloseWrite()
	}()
	n, err := io.Copy(io.Discard, c)
	if err != nil || n != int64(b.N)*copyChunk {
		b.Fatalf("io.Copy = %d, %v; want %d bytes", n, err, int64(b.N)*copyChunk)
	}
	if err := <-wrote; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	c.Close()
}
