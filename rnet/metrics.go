package rnet

import (
	"cmp"
	"runtime"
	"slices"
	"time"
)

// Metrics is a snapshot of what the process's rnet connections and
// listeners hold and have done, for operators: ReadMetrics returns it, the
// expvar variable "rnet" publishes it as JSON, and package rnetprom
// exports it to Prometheus. Gauges are levels now; Counters only grow.
type Metrics struct {
	Gauges   Gauges   `json:"gauges"`
	Counters Counters `json:"counters"`
}

// Gauges are what the process holds now.
type Gauges struct {
	// Connections are the open connections by transport and device, one
	// entry for every pair that has had any (zero now or not), sorted.
	Connections []OpenConnections `json:"connections"`
	// PendingHandshakes are the connection requests the process's
	// listeners are setting up or waiting on the dialer to confirm, each
	// in a slot of ListenConfig.MaxPendingHandshakes (resumes take none).
	PendingHandshakes int64 `json:"pending_handshakes"`
	// QueuePairs, MemoryRegions and PinnedBytes are the queue pairs and
	// registered memory regions the process holds on its devices, and
	// the bytes those regions pin (whole pages), as `rdma resource show
	// qp` and `mr` list them for the process.
	QueuePairs    int64 `json:"queue_pairs"`
	MemoryRegions int64 `json:"memory_regions"`
	PinnedBytes   int64 `json:"pinned_bytes"`
	// PollGroups are the groups of connections that share a completion
	// queue; SharedRecvQueues the shared receive queues they hold, and
	// SRQDepth the receives those queues have room for (see
	// docs/design.md, "Poll groups").
	PollGroups       int64 `json:"poll_groups"`
	SharedRecvQueues int64 `json:"shared_recv_queues"`
	SRQDepth         int64 `json:"srq_depth"`
}

// OpenConnections counts the open connections of one transport on one
// device.
type OpenConnections struct {
	// Transport is "rdma", or "tcp" for a *TCPConn, which DialConn made
	// by falling back or a dual listener accepted. A *TCPConn counts
	// until its Close or, dropped without one, until the garbage
	// collector finds it unreachable (when package net closes its
	// descriptor too).
	Transport string `json:"transport"`
	// Device is the RDMA device ("mlx5_0", "rxe0"), "simulated" for the
	// test fabric of package rnettest, "" for TCP.
	Device string `json:"device"`
	Count  int64  `json:"count"`
}

// Counters count what the process did since it started.
type Counters struct {
	// Dials are the connections Dial and DialContext (and DialConn, over
	// RDMA) established; Accepts the connections listeners' Accept
	// returned.
	Dials   uint64 `json:"dials"`
	Accepts uint64 `json:"accepts"`
	// Fallbacks are the connections made over TCP by the reason RDMA was
	// not used: DialConn's with TCPFallback, every reason a dial can have
	// whether zero or not, and FallbackPeerTCP for those dual listeners
	// accepted.
	Fallbacks map[FallbackReason]uint64 `json:"fallbacks"`
	// HandshakeErrors are the connection requests the process's listeners
	// refused or dropped before Accept could return them (what their
	// ListenConfig.HandshakeError hears), by reason; every reason is
	// present. See ListenerCounters for the reasons.
	HandshakeErrors map[string]uint64 `json:"handshake_errors"`
	// PeersGone are the connections whose peer vanished without closing
	// (ErrPeerGone), each counted once: their keepalives went
	// unacknowledged, the transport went down without the peer's
	// DISCONNECT, or a completion failed on the peer's side (counted by
	// the next keepalive tick or Close, whichever comes first). What
	// fails once Close has begun is not counted.
	PeersGone uint64 `json:"peers_gone"`
	// SRQRefills are the receives poll groups posted back on their shared
	// receive queues for peers that took them beyond their credits.
	SRQRefills uint64 `json:"srq_refills"`
	// Resumes are the connections that moved to a new queue pair after
	// their path failed (Config.Resume), by what found it failed:
	// "completion_error", "transport_event", "keepalive" or
	// "peer_request" (the peer resumed first); every cause is present.
	// ResumeFailures are the resumes that gave up, failing their
	// connection; ResumeTime is how long the resumes that completed took
	// in all, from the failure to the stream moving again; BytesResent
	// the bytes they sent again, which the peer had not received.
	Resumes        map[string]uint64 `json:"resumes"`
	ResumeFailures uint64            `json:"resume_failures"`
	ResumeTime     time.Duration     `json:"resume_time_ns"`
	BytesResent    uint64            `json:"bytes_resent"`
}

// ReadMetrics returns the process's Metrics now. Each value is read
// atomically on its own, not all together: a connection opened meanwhile
// may show in one and not in another.
func ReadMetrics() Metrics {
	var m Metrics
	res := readResources()
	m.Gauges = Gauges{
		Connections:       openConnections(),
		PendingHandshakes: pendingSlotsTaken.Load(),
		QueuePairs:        res.QPs,
		MemoryRegions:     res.MRs,
		PinnedBytes:       res.RegisteredBytes,
		PollGroups:        int64(pollGroups()),
		SharedRecvQueues:  res.SRQs,
		SRQDepth:          res.SRQDepth,
	}
	m.Counters = Counters{
		Dials:           processCounts.dials.Load(),
		Accepts:         processCounts.accepts.Load(),
		Fallbacks:       make(map[FallbackReason]uint64, FallbackPeerTCP),
		HandshakeErrors: processCounts.handshakeErrors.read(),
		PeersGone:       processCounts.peersGone.Load(),
		SRQRefills:      srqRefills(),
		Resumes:         readResumeCounts(),
		ResumeFailures:  resumeCounts.failed.Load(),
		ResumeTime:      time.Duration(resumeCounts.tookNanos.Load()),
		BytesResent:     resumeCounts.resentInBytes.Load(),
	}
	for r := FallbackNoDevice; r <= FallbackPeerTCP; r++ {
		m.Counters.Fallbacks[r] = dialCounts[r].Load()
	}
	return m
}

// ListenerMetrics is a snapshot of what one Listener holds and did;
// Listener.Metrics returns it.
type ListenerMetrics struct {
	Gauges   ListenerGauges   `json:"gauges"`
	Counters ListenerCounters `json:"counters"`
}

// ListenerGauges are what a Listener holds now.
type ListenerGauges struct {
	// PendingHandshakes are the connection requests it is setting up or
	// waiting on the dialer to confirm (see
	// ListenConfig.MaxPendingHandshakes; resumes take no slot and are not
	// counted); Backlog the established connections waiting for Accept.
	PendingHandshakes int64 `json:"pending_handshakes"`
	Backlog           int64 `json:"backlog"`
}

// ListenerCounters count what a Listener did.
//
// A request it refused was answered with a reject that tells an rnet
// dialer why; the reasons are "busy" (the backlog of connections waiting
// for Accept was full), "pending_full" (every pending-handshake slot was
// taken and the line for one was full), "bad_request" (unusable private
// data), "locked_memory" (the locked-memory limit stopped a registration),
// "resources" (another setup failure) and "resume_refused" (a request to
// resume a connection whose token the listener does not know: wrong,
// replayed or expired, or a listener that resumes none). A handshake that failed after
// the listener replied is "timeout" (the dialer did not confirm within
// Config.HandshakeTimeout), "evicted" (a newer request took its slot; for a
// resume, before or after the reply, a newer request for the same
// connection replaced it) or
// "aborted" (the dialer went away, or the connection manager failed).
type ListenerCounters struct {
	// Accepted are the connections Accept returned.
	Accepted uint64 `json:"accepted"`
	// Refused are the requests refused, by reason; HandshakeErrors the
	// handshakes that failed after the reply, by reason. Every reason of
	// each kind is present.
	Refused         map[string]uint64 `json:"refused"`
	HandshakeErrors map[string]uint64 `json:"handshake_errors"`
	// BacklogDrops are established connections closed without Accept
	// returning them: the Listener closed with them waiting, or (on the
	// test fabric) the backlog was full.
	BacklogDrops uint64 `json:"backlog_drops"`
}

// Metrics returns the Listener's metrics now.
func (h *Listener) Metrics() ListenerMetrics {
	m := h.l.metrics()
	runtime.KeepAlive(h)
	return m
}

func (l *listener) metrics() ListenerMetrics {
	m := ListenerMetrics{
		Gauges: ListenerGauges{Backlog: int64(len(l.conns))},
		Counters: ListenerCounters{
			Accepted:        l.counts.accepted.Load(),
			Refused:         l.counts.failures.readRange(firstRefusal, lastRefusal),
			HandshakeErrors: l.counts.failures.readRange(lastRefusal+1, numHandshakeFailures-1),
			BacklogDrops:    l.counts.backlogDrops.Load(),
		},
	}
	if l.counts.pending != nil {
		m.Gauges.PendingHandshakes = int64(l.counts.pending.inUse())
	}
	return m
}

// openConnections lists the open-connection gauges, sorted.
func openConnections() []OpenConnections {
	openConns.mu.Lock()
	list := make([]OpenConnections, 0, len(openConns.byKey))
	for k, n := range openConns.byKey {
		list = append(list, OpenConnections{Transport: k.transport, Device: k.device, Count: n.Load()})
	}
	openConns.mu.Unlock()
	if n, ok := openTCPConns(); ok {
		list = append(list, OpenConnections{Transport: "tcp", Count: n})
	}
	slices.SortFunc(list, func(a, b OpenConnections) int {
		return cmp.Or(cmp.Compare(a.Transport, b.Transport), cmp.Compare(a.Device, b.Device))
	})
	return list
}
