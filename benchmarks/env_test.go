package benchmarks

import (
	"net/netip"
	"os"
)

func envAddr(name string) netip.Addr {
	a, _ := netip.ParseAddr(os.Getenv(name))
	return a
}
