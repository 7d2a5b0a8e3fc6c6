package ring_test

import (
	"bytes"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
)

// MoreMayFollow tells a reader whether the last transfer may have been cut
// short of its write: a write after an idle spell larger than a first
// transfer comes as a StartTransfer-sized transfer and then the rest; a
// smaller write comes whole.
func TestMoreMayFollow(t *testing.T) {
	cfg := ring.Config{Autocork: false}
	f, a, b := corkPair(t, cfg)

	small := bytes.Repeat([]byte{'s'}, 147)
	writeAll(t, a, small)
	stepAll(t, f, a, b)
	readExactly(t, f, b, small, a)
	if b.eng.MoreMayFollow() {
		t.Fatal("after a 147-byte write: MoreMayFollow, but the write came whole")
	}

	// A transfer of a size where senders cut writes may have been cut
	// short; a larger write's last transfer (or the whole of it, in one
	// transfer of another size) was not.
	first := bytes.Repeat([]byte{'f'}, ring.StartTransfer)
	writeAll(t, a, first)
	stepAll(t, f, a, b)
	readExactly(t, f, b, first, a)
	if !b.eng.MoreMayFollow() {
		t.Fatalf("after a %d-byte transfer: !MoreMayFollow, but a sender may have cut it short", len(first))
	}
	big := bytes.Repeat([]byte{'b'}, ring.StartTransfer+952)
	writeAll(t, a, big)
	stepAll(t, f, a, b)
	readExactly(t, f, b, big, a)
	if b.eng.MoreMayFollow() {
		t.Fatalf("after a %d-byte write: MoreMayFollow", len(big))
	}
}
