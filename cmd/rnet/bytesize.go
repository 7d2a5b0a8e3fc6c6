package main

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
)

// byteSize is a flag of a number of bytes that takes the suffixes K, M, G
// and T (powers of 1024, as iperf3 and ib_write_bw read them), with an
// optional B or iB: 4K, 64KiB, 1G.
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
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b.n = n
	return nil
}

// parseByteSize reads "64", "4K", "64KiB", "1G" and the like.
func parseByteSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B"), "I")
	shift := 0
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
	}
	if shift > 0 {
		t = t[:len(t)-1]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("%q is not a number of bytes (such as 64, 4K, 1G)", s)
	}
	return n << shift, nil
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
