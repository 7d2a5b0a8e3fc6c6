package main

import (
	"strconv"

	"github.com/rnet-dev/rnet/internal/bytesize"
)

// byteSize is a flag of a number of bytes as bytesize.Parse reads it:
// 4K, 64KiB, 1G.
type byteSize struct {
	n *int64
}

func (b byteSize) String() string {
	if b.n == nil {
		return "0"
	}
	return strconv.FormatInt(*b.n, 10)
}

func (b byteSize) Set(s string) error {
	n, err := bytesize.Parse(s)
	if err != nil {
		return err
	}
	*b.n = n
	return nil
}
