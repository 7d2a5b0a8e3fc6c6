//go:build linux && (amd64 || arm64)

package ring

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rnet-dev/rnet/internal/wr"
)

// TestReadIntoBufferOver4GiB: a Read buffer longer than 4 GiB must not
// truncate the room left to 32 bits (which made it 0 and spun for ever).
// The buffer is reserved, not allocated: only the bytes copied are touched.
func TestReadIntoBufferOver4GiB(t *testing.T) {
	e, recvs := iwarpEngine(t)
	for i, size := range []int{1 << 32, 1<<32 + 10} {
		if err := e.Complete([]wr.Completion{iwarpMsg(e, recvs[i], MakeMsg(MsgData, 10))}); err != nil {
			t.Fatal(err)
		}
		p, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err != nil {
			t.Skipf("cannot reserve %d bytes: %v", size, err)
		}
		n, err := e.Read(p)
		unix.Munmap(p)
		if err != nil || n == 0 {
			t.Fatalf("Read(%d-byte buffer) = %d, %v", size, n, err)
		}
	}
	if e.ReadableBytes() != 0 {
		t.Fatalf("%d bytes left unread", e.ReadableBytes())
	}
}
