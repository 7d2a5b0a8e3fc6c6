package main

import (
	"runtime/debug"
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

// version is the module version this binary was built from, as the go
// command recorded it ("(devel)" for a build inside the module).
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " (" + s.Value[:12] + ")"
		}
	}
	return "rnet " + v + " " + bi.GoVersion
}
