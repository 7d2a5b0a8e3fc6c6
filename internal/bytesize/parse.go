package bytesize

import (
	"fmt"
	"math/big"
	"strings"
)

// maxParsed is the most Parse returns, 4 EiB: past any size a flag takes,
// and far from int64's end so that callers may add and multiply.
const maxParsed = 1 << 62

// unitShifts are the suffixes Parse takes, each a power of 1024.
var unitShifts = map[byte]uint{'K': 10, 'M': 20, 'G': 30, 'T': 40}

// Parse reads a number of bytes as the rnet command takes one: a number
// with an optional unit K, M, G or T, each a power of 1024 (as iperf3 and
// ib_write_bw read them), which may be written KiB or KB alike, in any
// case: "64", "64B", "4K", "4KiB", "1.5M", "1G". A fraction needs a unit,
// and is cut to whole bytes ("1.3K" is 1331).
func Parse(s string) (int64, error) {
	num, unit := splitUnit(strings.TrimSpace(s))
	whole, frac, isFrac := strings.Cut(num, ".")
	if whole == "" && frac == "" || !digits(whole) || !digits(frac) || isFrac && frac == "" {
		return 0, &ParseError{s, "not a size: want a number of bytes, such as 64, 4K, 1.5M or 1G"}
	}
	shift, ok := unitShift(unit)
	if !ok {
		return 0, &ParseError{s, fmt.Sprintf("unknown unit %q; sizes take K, M, G or T, powers of 1024, also written KiB or KB", unit)}
	}
	if isFrac && shift == 0 {
		return 0, &ParseError{s, "a fraction of a byte: give a unit (1.5K) or whole bytes"}
	}
	r, _ := new(big.Rat).SetString(orZero(whole) + "." + orZero(frac))
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), shift)))
	n := new(big.Int).Quo(r.Num(), r.Denom())
	if n.Cmp(big.NewInt(maxParsed)) > 0 {
		return 0, &ParseError{s, "too large a size (at most 4 EiB)"}
	}
	return n.Int64(), nil
}

// ParseError is a string Parse cannot read, and why.
type ParseError struct {
	Input  string
	Reason string
}

func (e *ParseError) Error() string { return fmt.Sprintf("size %q: %s", e.Input, e.Reason) }

// splitUnit splits s where its digits and decimal point end.
func splitUnit(s string) (num, unit string) {
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

// unitShift reads a unit: "", "B", or K, M, G or T alone or followed by
// "B", "iB" or "i", in any case.
func unitShift(unit string) (uint, bool) {
	u := strings.ToUpper(unit)
	if u == "" || u == "B" {
		return 0, true
	}
	shift, ok := unitShifts[u[0]]
	switch rest := u[1:]; {
	case !ok:
		return 0, false
	case rest == "" || rest == "B" || rest == "IB" || rest == "I":
		return shift, true
	}
	return 0, false
}

func digits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}
