package bytesize

import (
	"fmt"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 300: "300 B", 1023: "1023 B", 1 << 10: "1 KiB", 64 << 10: "64 KiB", 264 << 10: "264 KiB",
		1<<20 - 1: "1023.9 KiB", 8 << 20: "8 MiB", 3 << 29: "1.5 GiB", 1<<63 + 1<<62: "12 EiB", ^uint64(0): "15.9 EiB",
	} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestShort(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0", 64: "64", 1000: "1000", 1 << 10: "1K", 1536: "1536", 64 << 10: "64K", 1 << 20: "1M", 3 << 30: "3G", 1 << 40: "1T",
	} {
		got := Short(n)
		if got != want {
			t.Errorf("Short(%d) = %q, want %q", n, got, want)
		}
		if back, err := Parse(got); err != nil || back != n {
			t.Errorf("Parse(Short(%d)) = %d, %v", n, back, err)
		}
	}
}

// TestParse: one grammar for every size the rnet command takes: powers of
// 1024 whatever the spelling of the unit, fractions with a unit, and a
// clear error for anything else (64iB was once read as 64).
func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"64", 64}, {"0", 0}, {" 8 ", 8}, {"64B", 64}, {"64b", 64},
		{"4K", 4096}, {"4k", 4096}, {"4KB", 4096}, {"4KiB", 4096}, {"4kib", 4096}, {"4Ki", 4096},
		{"64KiB", 64 << 10}, {"1M", 1 << 20}, {"1G", 1 << 30}, {"2GB", 2 << 30}, {"1T", 1 << 40},
		{"1.5M", 3 << 19}, {"0.5K", 512}, {".5K", 512}, {"1.25GiB", 5 << 28}, {"2.0K", 2048},
		{"1.3K", 1331}, // cut to whole bytes
		{"4194304T", 1 << 62},
	} {
		if got, err := Parse(c.in); err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, says string }{
		{"", "not a size"}, {"K", "not a size"}, {"-1", "not a size"}, {"+1", "not a size"},
		{"1X", "unknown unit"}, {"64iB", "unknown unit"}, {"64i", "unknown unit"}, {"4KBi", "unknown unit"},
		{"4 K", "unknown unit"}, {"1e3", "unknown unit"}, {"0x10", "unknown unit"}, {"4KK", "unknown unit"},
		{"1.5", "fraction of a byte"}, {"1.5B", "fraction of a byte"}, {"1.", "not a size"}, {".", "not a size"}, {"1.2.3K", "not a size"},
		{"4194305T", "too large"}, {"99999999999999999999999", "too large"},
	} {
		got, err := Parse(c.in)
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.in)) {
			t.Errorf("Parse(%q) = %d, %v; want an error naming it and saying %q", c.in, got, err, c.says)
		}
	}
}
