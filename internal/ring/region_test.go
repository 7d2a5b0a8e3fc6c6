package ring

import "testing"

// TestSpan: a span inside the buffer is returned, one that starts before
// it, ends past it or wraps the address space is not.
func TestSpan(t *testing.T) {
	buf := make([]byte, 100)
	const base = 1 << 20
	for _, c := range []struct {
		addr uint64
		n    uint32
		ok   bool
	}{
		{base, 100, true},
		{base + 40, 60, true},
		{base + 100, 0, true},
		{base - 1, 10, false},
		{base + 40, 61, false},
		{base + 101, 0, false},
		{^uint64(0) - 3, 16, false},
		{base + 1, ^uint32(0), false},
	} {
		b, ok := Span(buf, base, c.addr, c.n)
		if ok != c.ok || ok && (len(b) != int(c.n) || c.n > 0 && &b[0] != &buf[c.addr-base]) {
			t.Errorf("Span(%#x, %d) = %d bytes, %t; want %t", c.addr, c.n, len(b), ok, c.ok)
		}
	}
}
