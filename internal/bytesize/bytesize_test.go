package bytesize

import "testing"

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

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{"64": 64, "4K": 4096, "4k": 4096, "64KiB": 64 << 10, "1M": 1 << 20, "1G": 1 << 30, "2GB": 2 << 30, "1T": 1 << 40, "0": 0, " 8 ": 8} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "K", "-1", "1X", "1.5G", "99999999999T"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, got)
		}
	}
}
