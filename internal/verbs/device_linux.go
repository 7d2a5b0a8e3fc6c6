//go:build cgo

package verbs

/*
#include "shim.h"
#include <stdlib.h>
*/
import "C"

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"
)

// Devices lists the RDMA devices with their ports and GID tables. A machine
// without RDMA gives an error matching ErrNoDevice.
func Devices() ([]DeviceInfo, error) {
	CountCgoCall()
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, deviceListError(err)
	}
	defer C.ibv_free_device_list(list)
	if n == 0 {
		return nil, &Error{Op: "ibv_get_device_list", Errno: syscall.ENODEV, Err: ErrNoDevice}
	}
	var out []DeviceInfo
	for _, d := range unsafe.Slice(list, int(n)) {
		name := C.GoString(C.ibv_get_device_name(d))
		CountCgoCall()
		c, err := C.ibv_open_device(d)
		if c == nil {
			return out, &Error{Op: "ibv_open_device", Device: name, Errno: errnoOr(err, syscall.ENODEV)}
		}
		info, qerr := queryDevice(c, name)
		if qerr == nil {
			info.MaxInlineData = probeMaxInline(c)
		}
		CountCgoCall()
		C.ibv_close_device(c)
		if qerr != nil {
			return out, qerr
		}
		out = append(out, info)
	}
	return out, nil
}

// DeviceListed reports whether the kernel lists an RDMA device named name
// now, without opening any: one that is being removed drops out of the
// list once its verbs device node goes.
func DeviceListed(name string) (bool, error) {
	CountCgoCall()
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return false, deviceListError(err)
	}
	defer C.ibv_free_device_list(list)
	for _, d := range unsafe.Slice(list, int(n)) {
		if C.GoString(C.ibv_get_device_name(d)) == name {
			return true, nil
		}
	}
	return false, nil
}

// deviceListError classifies a failed ibv_get_device_list: ENOSYS means no
// kernel support (no ib_uverbs, no devices), which is ErrNoDevice.
func deviceListError(err error) error {
	e := errnoOr(err, syscall.ENOSYS)
	if e == syscall.ENOSYS || e == syscall.ENODEV || e == syscall.ENOENT {
		return &Error{Op: "ibv_get_device_list", Errno: e, Err: ErrNoDevice}
	}
	return &Error{Op: "ibv_get_device_list", Errno: e}
}

func queryDevice(c *C.struct_ibv_context, name string) (DeviceInfo, error) {
	var attr C.struct_ibv_device_attr
	CountCgoCall()
	if r, err := C.ibv_query_device(c, &attr); r != 0 {
		return DeviceInfo{}, &Error{Op: "ibv_query_device", Device: name, Errno: retErrno(r, err)}
	}
	info := DeviceInfo{
		Name:      name,
		VendorID:  uint32(attr.vendor_id),
		FWVersion: C.GoString(&attr.fw_ver[0]),
		MaxQP:     int(attr.max_qp),
		MaxQPWR:   int(attr.max_qp_wr),
		MaxSGE:    int(attr.max_sge),
		MaxSGERD:  int(attr.max_sge_rd),
		MaxCQ:     int(attr.max_cq),
		MaxCQE:    int(attr.max_cqe),
		MaxMR:     int(attr.max_mr),
		MaxMRSize: uint64(attr.max_mr_size),
		MaxSRQ:    int(attr.max_srq),
		MaxSRQWR:  int(attr.max_srq_wr),
		MaxSRQSGE: int(attr.max_srq_sge),
	}
	// node_guid is big-endian in memory; keep its bytes as they are.
	guid := uint64(attr.node_guid)
	binary.NativeEndian.PutUint64(info.NodeGUID[:], guid)

	iwarp := c.device.transport_type == C.IBV_TRANSPORT_IWARP
	total := 0
	for p := 1; p <= int(attr.phys_port_cnt); p++ {
		var pa C.struct_ibv_port_attr
		CountCgoCall()
		if r, err := C.rnet_query_port(c, C.uint8_t(p), &pa); r != 0 {
			return info, &Error{Op: "ibv_query_port", Device: name, Errno: retErrno(r, err)}
		}
		info.Ports = append(info.Ports, PortInfo{
			Num:         p,
			State:       PortState(pa.state),
			LinkLayer:   LinkLayer(pa.link_layer),
			ActiveMTU:   mtuBytes(uint32(pa.active_mtu)),
			MaxMTU:      mtuBytes(uint32(pa.max_mtu)),
			MaxMsgSize:  uint32(pa.max_msg_sz),
			GIDTableLen: int(pa.gid_tbl_len),
		})
		total += int(pa.gid_tbl_len)
	}
	switch {
	case iwarp:
		info.Transport = TransportIWARP
	case c.device.transport_type != C.IBV_TRANSPORT_IB:
		info.Transport = TransportUnknown
	case len(info.Ports) > 0 && info.Ports[0].LinkLayer == LinkLayerEthernet:
		info.Transport = TransportRoCE
	default:
		info.Transport = TransportInfiniBand
	}
	if err := queryGIDs(c, &info, total); err != nil {
		return info, err
	}
	return info, nil
}

// queryGIDs fills each port's valid GID entries, with ibv_query_gid_table
// where the kernel has it and entry by entry otherwise.
func queryGIDs(c *C.struct_ibv_context, info *DeviceInfo, total int) error {
	if total == 0 {
		return nil
	}
	// Unlike C.malloc, C.calloc is libc's own and may return NULL.
	entries := (*C.struct_ibv_gid_entry)(C.calloc(C.size_t(total), C.sizeof_struct_ibv_gid_entry))
	if entries == nil {
		return &Error{Op: "calloc GID table", Device: info.Name, Errno: syscall.ENOMEM}
	}
	defer C.free(unsafe.Pointer(entries))
	es := unsafe.Slice(entries, total)
	CountCgoCall()
	n := int(C.rnet_query_gid_table(c, entries, C.size_t(total)))
	if n < 0 {
		// Old kernels: walk the table; empty slots fail and are skipped.
		n = 0
		for _, p := range info.Ports {
			for i := 0; i < p.GIDTableLen; i++ {
				CountCgoCall()
				if C.rnet_query_gid_ex(c, C.uint32_t(p.Num), C.uint32_t(i), &es[n]) == 0 {
					n++
				}
			}
		}
	}
	for _, e := range es[:n] {
		g := GIDEntry{
			Index:   int(e.gid_index),
			Type:    GIDType(e.gid_type),
			Ifindex: int(e.ndev_ifindex),
		}
		copy(g.GID[:], C.GoBytes(unsafe.Pointer(&e.gid), 16))
		if g.Type != GIDTypeIB {
			// A RoCE GID is the IPv6 form of the netdev's address;
			// ::ffff:a.b.c.d stands for IPv4 a.b.c.d.
			g.Addr = netip.AddrFrom16(g.GID).Unmap()
		}
		for pi := range info.Ports {
			if info.Ports[pi].Num == int(e.port_num) {
				info.Ports[pi].GIDs = append(info.Ports[pi].GIDs, g)
			}
		}
	}
	return nil
}

func mtuBytes(m uint32) int {
	if m == 0 || m > 5 {
		return 0
	}
	return 128 << m // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5
}

// probeMaxInline finds the largest max_inline_data an RC QP may be created
// with, since no device attribute reports it: grow until creation fails,
// then bisect. It returns 0 if no QP can be made at all.
func probeMaxInline(c *C.struct_ibv_context) int {
	CountCgoCall()
	pd := C.ibv_alloc_pd(c)
	if pd == nil {
		return 0
	}
	defer C.ibv_dealloc_pd(pd)
	CountCgoCall()
	cq := C.ibv_create_cq(c, 32, nil, nil, 0)
	if cq == nil {
		return 0
	}
	defer C.ibv_destroy_cq(cq)
	try := func(inline int) bool {
		var attr C.struct_ibv_qp_init_attr
		attr.send_cq, attr.recv_cq = cq, cq
		attr.qp_type = C.IBV_QPT_RC
		attr.cap.max_send_wr, attr.cap.max_recv_wr = 16, 16
		attr.cap.max_send_sge, attr.cap.max_recv_sge = 2, 1
		attr.cap.max_inline_data = C.uint32_t(inline)
		CountCgoCall()
		qp := C.ibv_create_qp(pd, &attr)
		if qp == nil {
			return false
		}
		CountCgoCall()
		C.ibv_destroy_qp(qp)
		return true
	}
	if !try(0) {
		return 0
	}
	lo, hi := 0, 64 // lo works; hi is the next guess
	for try(hi) {
		if hi >= 1<<16 {
			return hi // more than any protocol here needs
		}
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if try(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
