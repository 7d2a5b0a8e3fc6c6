package stream

import (
	"fmt"
	"io"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
)

// streamPattern is the byte at offset i of a checked stream.
func streamPattern(i, salt uint64) byte { return byte((i + salt) * 0x9e3779b97f4a7c15 >> 56) }

// streamChecked writes total patterned bytes on w in writes of writeSize
// and reads them on r in reads of up to readSize, checking every byte.
func streamChecked(t *testing.T, w io.Writer, r io.Reader, total, writeSize, readSize int, salt uint64) {
	t.Helper()
	werr := make(chan error, 1)
	go func() {
		buf := make([]byte, writeSize)
		for off := 0; off < total; {
			n := min(writeSize, total-off)
			for i := range buf[:n] {
				buf[i] = streamPattern(uint64(off+i), salt)
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
			if want := streamPattern(uint64(off+i), salt); c != want {
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

// A connection whose larger regions cannot be registered goes on at its
// first size.
func TestSimRingsRegistrationRefused(t *testing.T) {
	testHookAddRegion = func(kind ring.RegionKind, size int) error {
		return fmt.Errorf("refused %v region of %d bytes", kind, size)
	}
	defer func() { testHookAddRegion = nil }()
	a, b := simPipe(t, nil)
	defer a.Close()
	defer b.Close()
	streamChecked(t, a, b, 4<<20, 64<<10, 64<<10, 3)
	sa, sb := a.Stats(), b.Stats()
	if sa.SendRingSize != ring.DefaultIdleBufSize || sb.RecvRingSize != ring.DefaultIdleBufSize {
		t.Fatalf("rings moved: send %d receive %d", sa.SendRingSize, sb.RecvRingSize)
	}
	if sa.Engine.RegionsDeclined == 0 || sb.Engine.RegionsDeclined == 0 {
		t.Fatalf("declined: writer %d reader %d", sa.Engine.RegionsDeclined, sb.Engine.RegionsDeclined)
	}
}
