package ring

import "testing"

// TestConnDataPortMTU: offset 4 carries the sender's port MTU as an IB MTU
// code; zero (C rsocket) and any code outside 1 to 5 (an untrusted or later
// peer) decode as "not said", never as an error, and offsets 5 and 6 stay
// zero.
func TestConnDataPortMTU(t *testing.T) {
	for code := 0; code <= 0xff; code++ {
		c := ConnData{Version: ConnDataVersion, Flags: FlagIOMap, Credits: 1, PortMTU: uint8(code)}
		b := c.Encode()
		if b[4] != uint8(code) || b[5] != 0 || b[6] != 0 {
			t.Fatalf("code %d: reserved bytes % x", code, b[4:7])
		}
		dec, err := DecodeConnData(b[:])
		if err != nil {
			t.Fatalf("code %d: %v", code, err)
		}
		want := 0
		if code >= 1 && code <= 5 {
			want = 128 << code
		}
		if got := dec.PortMTUBytes(); dec.PortMTU != uint8(code) || got != want {
			t.Fatalf("code %d: decoded %d, %d bytes; want %d bytes", code, dec.PortMTU, got, want)
		}
	}
	for _, tc := range []struct{ bytes, code int }{
		{0, 0}, {255, 0}, {256, 1}, {511, 1}, {512, 2}, {1024, 3}, {1420, 3},
		{2048, 4}, {4095, 4}, {4096, 5}, {8920, 5}, {1 << 20, 5},
	} {
		if got := PortMTUCode(tc.bytes); int(got) != tc.code {
			t.Errorf("PortMTUCode(%d) = %d, want %d", tc.bytes, got, tc.code)
		}
	}
	var b [ConnDataSize]byte
	SetPortMTU(&b, 1024)
	if b[4] != 3 {
		t.Fatalf("SetPortMTU(1024): byte 4 = %d, want 3", b[4])
	}
}
