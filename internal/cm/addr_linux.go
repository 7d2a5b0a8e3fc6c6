//go:build cgo

package cm

/*
#include "shim.h"
*/
import "C"

import (
	"net"
	"net/netip"
	"strconv"
	"unsafe"
)

func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }

func toC(ap netip.AddrPort) C.struct_rnet_addr {
	var a C.struct_rnet_addr
	ip := ap.Addr()
	if !ip.IsValid() {
		return a
	}
	a.port = C.uint16_t(ap.Port())
	if ip.Is4() || ip.Is4In6() {
		a.family = C.AF_INET
		b := ip.Unmap().As4()
		for i := range b {
			a.ip[i] = C.uint8_t(b[i])
		}
		return a
	}
	a.family = C.AF_INET6
	b := ip.As16()
	for i := range b {
		a.ip[i] = C.uint8_t(b[i])
	}
	if z := ip.Zone(); z != "" {
		if n, err := strconv.Atoi(z); err == nil {
			a.scope = C.uint32_t(n)
		} else if ifi, err := net.InterfaceByName(z); err == nil {
			a.scope = C.uint32_t(ifi.Index)
		}
	}
	return a
}

func fromC(a C.struct_rnet_addr) netip.AddrPort {
	var ip netip.Addr
	switch a.family {
	case C.AF_INET:
		ip = netip.AddrFrom4([4]byte{byte(a.ip[0]), byte(a.ip[1]), byte(a.ip[2]), byte(a.ip[3])})
	case C.AF_INET6:
		var b [16]byte
		for i := range b {
			b[i] = byte(a.ip[i])
		}
		ip = netip.AddrFrom16(b)
		if a.scope != 0 {
			zone := strconv.Itoa(int(a.scope))
			if ifi, err := net.InterfaceByIndex(int(a.scope)); err == nil {
				zone = ifi.Name
			}
			ip = ip.WithZone(zone)
		}
	default:
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ip, uint16(a.port))
}
