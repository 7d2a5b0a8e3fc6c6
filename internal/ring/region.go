package ring

// Region is one block of registered memory given to the engine, with the
// address the NIC and the peer use for Buf[0] and the keys it was
// registered with.
type Region struct {
	Buf  []byte
	Addr uint64
	LKey uint32
	RKey uint32
}

// Span returns the n bytes at address addr of buf, registered at address
// base, if they lie wholly within it: the check every lookup of a work
// request's memory makes, written so that no sum overflows.
func Span(buf []byte, base, addr uint64, n uint32) ([]byte, bool) {
	if addr < base || addr-base > uint64(len(buf)) || uint64(n) > uint64(len(buf))-(addr-base) {
		return nil, false
	}
	off := addr - base
	return buf[off : off+uint64(n)], true
}

// utoa formats without fmt so the hot paths never pull it in by accident.
func utoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
