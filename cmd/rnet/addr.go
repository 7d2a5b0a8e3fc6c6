package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// DefaultPort is rstream's port.
const DefaultPort = 7471

// hostPort completes "host", "host:port", ":port" or "" with DefaultPort.
func hostPort(s string) (string, error) {
	if s == "" {
		return ":" + strconv.Itoa(DefaultPort), nil
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return net.JoinHostPort(s, strconv.Itoa(DefaultPort)), nil
	}
	if h, ok := strings.CutPrefix(s, "["); ok && strings.HasSuffix(h, "]") {
		// A bracketed IPv6 address without a port.
		return net.JoinHostPort(strings.TrimSuffix(h, "]"), strconv.Itoa(DefaultPort)), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		// A bare host name.
		return net.JoinHostPort(s, strconv.Itoa(DefaultPort)), nil
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		// A service name, as rnet.Dial and net.Dial take.
		n, lerr := net.LookupPort("tcp", port)
		if lerr != nil {
			return "", fmt.Errorf("bad port in %q: not a number or a known service name", s)
		}
		port = strconv.Itoa(n)
	}
	return net.JoinHostPort(host, port), nil
}

func explainDevices(err error) error {
	if errors.Is(err, verbs.ErrNoDevice) {
		return fmt.Errorf("no RDMA device on this machine (load a driver, or rdma_rxe/siw for Soft-RoCE/SoftiWARP): %w", err)
	}
	if errors.Is(err, verbs.ErrNotSupported) {
		return fmt.Errorf("this build has no RDMA support (needs Linux, cgo, libibverbs and librdmacm): %w", err)
	}
	return err
}

// rdmaAddrs reports whether ip may be the address of an RDMA interface here
// and lists the addresses RoCE GIDs name, as "ip (device)".
func rdmaAddrs(ip netip.Addr) (ok bool, all []string, err error) {
	infos, err := verbs.Devices()
	if err != nil && len(infos) == 0 {
		return false, nil, explainDevices(err)
	}
	ok, all = rdmaAddrMatch(ip, infos, err == nil)
	return ok, all, nil
}

// rdmaAddrMatch is rdmaAddrs over a device listing. Only RoCE GIDs name IP
// addresses: with any other device (InfiniBand's IPoIB, iWARP) or a listing
// cut short, ip may belong to a device whose addresses are not known, so it
// passes, unless it is a loopback address (which only a lab's siw on lo
// could own). A zone is ignored; link-local GIDs match but are not listed.
func rdmaAddrMatch(ip netip.Addr, infos []verbs.DeviceInfo, complete bool) (ok bool, all []string) {
	ok = !complete
	want := ip.WithZone("").Unmap()
	for _, d := range infos {
		if d.Transport != verbs.TransportRoCE && !want.IsLoopback() {
			ok = true
		}
		for _, p := range d.Ports {
			for _, g := range p.GIDs {
				if !g.Addr.IsValid() {
					continue
				}
				if g.Addr.WithZone("").Unmap() == want {
					ok = true
				}
				if !g.Addr.IsLinkLocalUnicast() {
					all = append(all, g.Addr.String()+" ("+d.Name+")")
				}
			}
		}
	}
	return ok || len(all) == 0, all
}

// checkRDMAAddr fails with a clear message when ip is surely not the address
// of an RDMA interface (see rdmaAddrMatch).
func checkRDMAAddr(ip netip.Addr, what string) error {
	if !ip.IsValid() || ip.IsUnspecified() {
		return nil
	}
	ok, all, err := rdmaAddrs(ip)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	return fmt.Errorf("%s %s is not on an RDMA interface; RDMA addresses here: %s (see rnet devices)", what, ip, strings.Join(all, ", "))
}
