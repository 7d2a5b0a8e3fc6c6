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
