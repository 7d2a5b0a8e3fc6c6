package main

import "fmt"

// maxBodySize bounds the size a request may ask for.
const maxBodySize = 16 << 20

// patternByte is byte i of the pattern for seed: every byte depends on both,
// so a byte moved, dropped, duplicated or taken from another response
// shows.
func patternByte(seed uint32, i int) byte {
	return byte((uint32(i)*0x9E3779B1 + seed*0x85EBCA6B + uint32(i>>16)) >> 24)
}

// fillPattern writes seed's pattern into b.
func fillPattern(b []byte, seed uint32) {
	for i := range b {
		b[i] = patternByte(seed, i)
	}
}

// checkPattern checks every byte of b against seed's pattern of want bytes.
func checkPattern(b []byte, seed uint32, want int) error {
	if len(b) != want {
		return fmt.Errorf("body of %d bytes, want %d", len(b), want)
	}
	for i, c := range b {
		if p := patternByte(seed, i); c != p {
			return fmt.Errorf("body byte %d of %d is %#02x, want %#02x (seed %d)", i, want, c, p, seed)
		}
	}
	return nil
}
