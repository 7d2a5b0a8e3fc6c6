package rnet

import (
	"net/netip"
	"runtime"
	"time"

	"github.com/rnet-dev/rnet/internal/stream"
)

// ConnInfo is what a connection runs with: where its queue pair sends, the
// settings the device and the connection manager put in effect, and its
// rings now. Conn.Info returns it. While a connection resumes (Config.Resume)
// its failed path has given its device back, and the fields the device
// reports (port, path MTU, GID, remote queue pair, ACK timeout, retries)
// are zero.
type ConnInfo struct {
	// Transport is "RoCE", "InfiniBand" or "iWARP"; "TCP" for a
	// connection resumed over TCP (Dialer.TCPFallback), whose device
	// fields are zero; or "simulated" for a connection over the test
	// fabric, which has no device.
	Transport string `json:"transport"`
	Device    string `json:"device"` // the RDMA device, e.g. "mlx5_0" or "rxe0"
	Port      int    `json:"port"`   // the device port, from 1
	// QPNumber and RemoteQPNumber are this end's queue pair number and its
	// peer's, as `rdma resource show qp` lists them (lqpn and rqpn); 0
	// over the test fabric, and RemoteQPNumber 0 on iWARP, whose devices
	// do not report it.
	QPNumber       uint32 `json:"qp_number"`
	RemoteQPNumber uint32 `json:"remote_qp_number"`
	// GIDIndex is the source GID's index in the port's GID table (the
	// show_gids column), and GID that entry; on RoCE the GID stands for
	// the local IP address and the index picks RoCE v1 or v2.
	GIDIndex int        `json:"gid_index"`
	GID      netip.Addr `json:"gid"`
	// PathMTU is the largest packet payload the queue pair sends, in
	// bytes (256 to 4096): the smallest of the path's and the two ports'
	// active MTUs; 0 on iWARP, which has none of its own.
	PathMTU int `json:"path_mtu"`
	// TrafficClass is the TOS byte of the packets' IP header on RoCE (the
	// GRH traffic class on InfiniBand), and ServiceLevel the priority the
	// kernel derived from it (on InfiniBand, the path record's). See
	// Config.TrafficClass.
	TrafficClass int `json:"traffic_class"`
	ServiceLevel int `json:"service_level"`
	// AckTimeout is the queue pair's local ACK timeout, 0 if it has none
	// (iWARP); RetryCount and RNRRetryCount the resends its transport
	// makes. See Config.AckTimeout, RetryCount and RNRRetryCount.
	AckTimeout    time.Duration `json:"ack_timeout_ns"`
	RetryCount    int           `json:"retry_count"`
	RNRRetryCount int           `json:"rnr_retry_count"`
	// MaxInlineData is the most the device copies into a work request,
	// and InlineThreshold the largest transfer rnet sends that way (0:
	// none).
	MaxInlineData   int `json:"max_inline_data"`
	InlineThreshold int `json:"inline_threshold"`
	// SendRingSize and RecvRingSize are the rings' sizes now, and
	// SendBufferSize and RecvBufferSize the most they grow to (see
	// Config.IdleBufferSize).
	SendRingSize   int `json:"send_ring_size"`
	SendBufferSize int `json:"send_buffer_size"`
	RecvRingSize   int `json:"recv_ring_size"`
	RecvBufferSize int `json:"recv_buffer_size"`
	// SendQueueSize is the send queue's depth; CreditWindow the messages
	// the peer may send ahead of our reading now, and RecvQueueSize the
	// most it grows to.
	SendQueueSize int `json:"send_queue_size"`
	CreditWindow  int `json:"credit_window"`
	RecvQueueSize int `json:"recv_queue_size"`
	// SharedRecvQueue says the connection takes its receives from its
	// poll group's shared receive queue (see docs/design.md, "Poll
	// groups").
	SharedRecvQueue bool `json:"shared_recv_queue"`
	// NoDelay says autocorking is off: each Write is posted at once (see
	// Config.NoDelay).
	NoDelay bool `json:"no_delay"`
}

// transportNamer is a queue pair that is not a device's: a path resumed
// over TCP (internal/tcpqp) names itself "TCP".
type transportNamer interface {
	Transport() string
}

// pathReporter is a queue pair that can say where it sends; the test
// fabric's cannot, as it has no device.
type pathReporter interface {
	path(*ConnInfo) error
}

// Info reports what the connection runs with. It queries the device, so
// it is for diagnostics, not for every call. After Close it fails with
// net.ErrClosed; once the device is gone, the device's part is left zero
// and the error says why.
func (h *Conn) Info() (ConnInfo, error) {
	info, err := h.info()
	runtime.KeepAlive(h)
	return info, exportError(err)
}

func (h *Conn) info() (ConnInfo, error) {
	e, err := h.conn.Info()
	if err != nil {
		return ConnInfo{}, err
	}
	cfg := e.Config
	info := ConnInfo{
		Transport:       "simulated",
		InlineThreshold: max(cfg.InlineThreshold, 0),
		SendBufferSize:  cfg.SendBufferSize,
		RecvBufferSize:  cfg.RecvBufferSize,
		SendQueueSize:   cfg.SendQueueSize,
		CreditWindow:    e.CreditWindow,
		RecvQueueSize:   cfg.RecvQueueSize,
		SharedRecvQueue: cfg.SharedRecv,
		NoDelay:         noDelay(cfg),
		SendRingSize:    e.SendRingSize,
		RecvRingSize:    e.RecvRingSize,
	}
	var pathErr error
	if err := h.conn.WithQueuePair(func(q stream.QueuePair) {
		if t, ok := q.(transportNamer); ok {
			info.Transport = t.Transport()
		}
		if p, ok := q.(pathReporter); ok {
			pathErr = p.path(&info)
		}
	}); err != nil {
		return info, err
	}
	if pathErr != nil {
		return info, stream.OpError("info", h.conn.LocalAddr(), h.conn.RemoteAddr(), pathErr)
	}
	return info, nil
}
