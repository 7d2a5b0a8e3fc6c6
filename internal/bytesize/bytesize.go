// Package bytesize reads and writes numbers of bytes in powers of 1024, as
// iperf3 and ib_write_bw read them, so that the rnet command, its error
// messages and the benchmark report print one size the same way.
package bytesize

import "strconv"

var units = []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// Format writes n as people read an amount of memory or data: "300 B",
// "64 KiB", "1.5 GiB", with at most one decimal, cut rather than rounded
// so that a figure never reads larger than it is.
func Format(n uint64) string {
	i, scale := 0, uint64(1)
	for i+1 < len(units) && n >= scale<<10 {
		i, scale = i+1, scale<<10
	}
	whole, tenths := n/scale, (n%scale)*10/scale
	if tenths == 0 {
		return strconv.FormatUint(whole, 10) + " " + units[i]
	}
	return strconv.FormatUint(whole, 10) + "." + strconv.FormatUint(tenths, 10) + " " + units[i]
}

// Short writes n in the form Parse reads and a command line takes, "64",
// "4K", "1M", with the largest suffix that leaves it whole: a label for a
// table column, where a space would split the cell.
func Short(n int64) string {
	for _, s := range []struct {
		suffix string
		shift  uint
	}{{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}} {
		if n >= 1<<s.shift && n%(1<<s.shift) == 0 {
			return strconv.FormatInt(n>>s.shift, 10) + s.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
