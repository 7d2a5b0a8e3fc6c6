package conntest

import (
	"io"
	"testing"
)

// Pattern is the byte at offset i of a checked stream.
func Pattern(i, salt uint64) byte { return byte((i + salt) * 0x9e3779b97f4a7c15 >> 56) }

// StreamChecked writes total patterned bytes on w in writes of writeSize
// and reads them on r in reads of up to readSize, checking every byte.
func StreamChecked(t *testing.T, w io.Writer, r io.Reader, total, writeSize, readSize int, salt uint64) {
	t.Helper()
	werr := make(chan error, 1)
	go func() {
		buf := make([]byte, writeSize)
		for off := 0; off < total; {
			n := min(writeSize, total-off)
			for i := range buf[:n] {
				buf[i] = Pattern(uint64(off+i), salt)
			}
			if _, err := w.Write(buf[:n]); err != nil {
				werr <- err
				return
			}
			off += n
		}
		werr <- nil
	}()
	buf := make([]byte, readSize)
	for off := 0; off < total; {
		n, err := r.Read(buf[:min(readSize, total-off)])
		for i, c := range buf[:n] {
			if want := Pattern(uint64(off+i), salt); c != want {
				t.Fatalf("byte %d: got %#x, want %#x", off+i, c, want)
			}
		}
		off += n
		if err != nil {
			t.Fatalf("read at %d of %d: %v", off, total, err)
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
}
