//go:build linux && cgo

package rnet

import (
	"net/netip"

	"github.com/rnet-dev/rnet/internal/verbs"
)

// path fills in the device's part of info from the queue pair as the
// device reports it now, which is what is in effect.
func (q *verbsQP) path(info *ConnInfo) error {
	d := q.deviceInfo
	info.Transport = d.Transport.String()
	info.Device = q.device
	info.MaxInlineData = int(q.qp.Caps().MaxInlineData)
	p, err := q.qp.Path()
	if err != nil {
		return err
	}
	a, err := q.qp.Attrs()
	if err != nil {
		return err
	}
	info.Port, info.PathMTU, info.GIDIndex = p.Port, p.PathMTU, p.GIDIndex
	info.ServiceLevel = int(p.ServiceLevel)
	if p.GlobalRoute {
		info.TrafficClass = int(p.TrafficClass)
	}
	info.GID = portGID(d, p.Port, p.GIDIndex)
	if d.Transport != verbs.TransportIWARP {
		if a.AckTimeout != 0 {
			info.AckTimeout = ackTimeoutUnit << a.AckTimeout
		}
		info.RetryCount, info.RNRRetryCount = int(a.RetryCount), int(a.RNRRetry)
	} else {
		info.PathMTU = 0 // siw reports one, though TCP segments the stream
	}
	return nil
}

// portGID is the GID at index of a port's table, or the zero Addr.
func portGID(d verbs.DeviceInfo, port, index int) netip.Addr {
	for _, pi := range d.Ports {
		if pi.Num != port {
			continue
		}
		for _, g := range pi.GIDs {
			if g.Index == index {
				return netip.AddrFrom16(g.GID)
			}
		}
	}
	return netip.Addr{}
}
