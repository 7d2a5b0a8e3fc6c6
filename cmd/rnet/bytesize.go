package main

import (
	"errors"
	"fmt"

	"github.com/rnet-dev/rnet/internal/bytesize"
)

// byteSize is a flag of a number of bytes as bytesize.Parse reads it (4K,
// 64KiB, 1.5M, 1G), the one form every size flag of rnet takes.
type byteSize[T int | int64] struct {
	n *T
}

func (b byteSize[T]) String() string {
	if b.n == nil {
		return "0"
	}
	return bytesize.Short(int64(*b.n))
}

func (b byteSize[T]) Set(s string) error {
	n, err := bytesize.Parse(s)
	var pe *bytesize.ParseError
	if errors.As(err, &pe) {
		// The flag package names the value already.
		return errors.New(pe.Reason)
	}
	if err != nil {
		return err
	}
	if int64(T(n)) != n {
		return fmt.Errorf("%d bytes is too large", n)
	}
	*b.n = T(n)
	return nil
}
