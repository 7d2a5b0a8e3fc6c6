// Package rnetprom exports rnet's metrics to Prometheus: a Collector reads
// rnet.ReadMetrics when it is scraped, and a listener's Metrics with
// ListenerCollector. It is a module of its own, so that the core module
// needs nothing beyond golang.org/x/sys.
//
//	prometheus.MustRegister(rnetprom.NewCollector())
//	http.Handle("/metrics", promhttp.Handler())
package rnetprom

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rnet-dev/rnet/rnet"
)

// The process's metrics, by name: gauges, then counters.
var (
	connectionsDesc = prometheus.NewDesc("rnet_connections",
		"Open rnet connections, by transport (rdma, tcp) and RDMA device.", []string{"transport", "device"}, nil)
	pendingDesc = prometheus.NewDesc("rnet_pending_handshakes",
		"Connection requests the process's listeners are setting up or waiting on the dialer to confirm.", nil, nil)
	queuePairsDesc = prometheus.NewDesc("rnet_queue_pairs",
		"Queue pairs the process holds on its RDMA devices.", nil, nil)
	memoryRegionsDesc = prometheus.NewDesc("rnet_memory_regions",
		"Registered memory regions the process holds on its RDMA devices.", nil, nil)
	pinnedBytesDesc = prometheus.NewDesc("rnet_pinned_bytes",
		"Bytes the process's registered memory regions pin.", nil, nil)
	pollGroupsDesc = prometheus.NewDesc("rnet_poll_groups",
		"Poll groups: connections sharing a completion queue.", nil, nil)
	sharedRecvQueuesDesc = prometheus.NewDesc("rnet_shared_recv_queues",
		"Shared receive queues of the poll groups.", nil, nil)
	srqDepthDesc = prometheus.NewDesc("rnet_srq_depth",
		"Receives the shared receive queues have room for.", nil, nil)

	dialsDesc = prometheus.NewDesc("rnet_dials_total",
		"Connections dialled over RDMA.", nil, nil)
	acceptsDesc = prometheus.NewDesc("rnet_accepts_total",
		"Connections the process's listeners accepted.", nil, nil)
	fallbacksDesc = prometheus.NewDesc("rnet_fallbacks_total",
		"Connections made over TCP instead of RDMA, by reason.", []string{"reason"}, nil)
	handshakeErrorsDesc = prometheus.NewDesc("rnet_handshake_errors_total",
		"Connection requests the process's listeners refused or dropped, by reason.", []string{"reason"}, nil)
	peersGoneDesc = prometheus.NewDesc("rnet_peers_gone_total",
		"Connections whose peer vanished without closing.", nil, nil)
	srqRefillsDesc = prometheus.NewDesc("rnet_srq_refills_total",
		"Receives posted back on shared receive queues for peers that took them beyond their credits.", nil, nil)
	resumesDesc = prometheus.NewDesc("rnet_resumes_total",
		"Connections moved to a new queue pair after their path failed, by what found it failed.", []string{"cause"}, nil)
	resumeFailuresDesc = prometheus.NewDesc("rnet_resume_failures_total",
		"Resumes that gave up, failing their connection.", nil, nil)
	resumeSecondsDesc = prometheus.NewDesc("rnet_resume_seconds_total",
		"Time the completed resumes took, from the path's failure to the stream moving again.", nil, nil)
	bytesResentDesc = prometheus.NewDesc("rnet_resume_bytes_resent_total",
		"Bytes resumes sent again because the peer had not received them.", nil, nil)
)

// Collector is a prometheus.Collector of the process's rnet.Metrics.
type Collector struct{}

// NewCollector returns a Collector. Register one per registry.
func NewCollector() *Collector { return &Collector{} }

// Describe sends every metric's description.
func (*Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{connectionsDesc, pendingDesc, queuePairsDesc, memoryRegionsDesc,
		pinnedBytesDesc, pollGroupsDesc, sharedRecvQueuesDesc, srqDepthDesc,
		dialsDesc, acceptsDesc, fallbacksDesc, handshakeErrorsDesc, peersGoneDesc, srqRefillsDesc,
		resumesDesc, resumeFailuresDesc, resumeSecondsDesc, bytesResentDesc} {
		ch <- d
	}
}

// Collect reads rnet.ReadMetrics and sends it.
func (*Collector) Collect(ch chan<- prometheus.Metric) {
	m := rnet.ReadMetrics()
	g, c := m.Gauges, m.Counters
	for _, o := range g.Connections {
		ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.GaugeValue, float64(o.Count), o.Transport, o.Device)
	}
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	gauge(pendingDesc, g.PendingHandshakes)
	gauge(queuePairsDesc, g.QueuePairs)
	gauge(memoryRegionsDesc, g.MemoryRegions)
	gauge(pinnedBytesDesc, g.PinnedBytes)
	gauge(pollGroupsDesc, g.PollGroups)
	gauge(sharedRecvQueuesDesc, g.SharedRecvQueues)
	gauge(srqDepthDesc, g.SRQDepth)
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(dialsDesc, c.Dials)
	counter(acceptsDesc, c.Accepts)
	for reason, n := range c.Fallbacks {
		counter(fallbacksDesc, n, reasonLabel(reason))
	}
	for reason, n := range c.HandshakeErrors {
		counter(handshakeErrorsDesc, n, reason)
	}
	counter(peersGoneDesc, c.PeersGone)
	counter(srqRefillsDesc, c.SRQRefills)
	for cause, n := range c.Resumes {
		counter(resumesDesc, n, cause)
	}
	counter(resumeFailuresDesc, c.ResumeFailures)
	ch <- prometheus.MustNewConstMetric(resumeSecondsDesc, prometheus.CounterValue, c.ResumeTime.Seconds())
	counter(bytesResentDesc, c.BytesResent)
}

// reasonLabel is r as rnet's JSON names it.
func reasonLabel(r rnet.FallbackReason) string {
	if text, err := r.MarshalText(); err == nil {
		return string(text)
	}
	return strconv.Itoa(int(r))
}

// A listener's metrics, labelled with its address.
var (
	listenerPendingDesc = prometheus.NewDesc("rnet_listener_pending_handshakes",
		"Connection requests the listener is setting up or waiting on the dialer to confirm.", []string{"listener"}, nil)
	listenerBacklogDesc = prometheus.NewDesc("rnet_listener_backlog",
		"Established connections waiting for Accept.", []string{"listener"}, nil)
	listenerAcceptedDesc = prometheus.NewDesc("rnet_listener_accepted_total",
		"Connections Accept returned.", []string{"listener"}, nil)
	listenerRefusedDesc = prometheus.NewDesc("rnet_listener_refused_total",
		"Connection requests the listener refused, by reason.", []string{"listener", "reason"}, nil)
	listenerHandshakeErrorsDesc = prometheus.NewDesc("rnet_listener_handshake_errors_total",
		"Handshakes that failed after the listener's reply, by reason.", []string{"listener", "reason"}, nil)
	listenerBacklogDropsDesc = prometheus.NewDesc("rnet_listener_backlog_drops_total",
		"Established connections closed without Accept returning them.", []string{"listener"}, nil)
)

// ListenerCollector is a prometheus.Collector of one listener's
// rnet.ListenerMetrics, labelled listener="ADDRESS". Unregister it when
// the listener closes.
type ListenerCollector struct {
	ln   *rnet.Listener
	addr string
}

// NewListenerCollector returns the Collector of ln's metrics.
func NewListenerCollector(ln *rnet.Listener) *ListenerCollector {
	return &ListenerCollector{ln: ln, addr: ln.Addr().String()}
}

// Describe sends every metric's description.
func (*ListenerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{listenerPendingDesc, listenerBacklogDesc, listenerAcceptedDesc,
		listenerRefusedDesc, listenerHandshakeErrorsDesc, listenerBacklogDropsDesc} {
		ch <- d
	}
}

// Collect reads the listener's Metrics and sends them.
func (lc *ListenerCollector) Collect(ch chan<- prometheus.Metric) {
	m := lc.ln.Metrics()
	ch <- prometheus.MustNewConstMetric(listenerPendingDesc, prometheus.GaugeValue, float64(m.Gauges.PendingHandshakes), lc.addr)
	ch <- prometheus.MustNewConstMetric(listenerBacklogDesc, prometheus.GaugeValue, float64(m.Gauges.Backlog), lc.addr)
	ch <- prometheus.MustNewConstMetric(listenerAcceptedDesc, prometheus.CounterValue, float64(m.Counters.Accepted), lc.addr)
	for reason, n := range m.Counters.Refused {
		ch <- prometheus.MustNewConstMetric(listenerRefusedDesc, prometheus.CounterValue, float64(n), lc.addr, reason)
	}
	for reason, n := range m.Counters.HandshakeErrors {
		ch <- prometheus.MustNewConstMetric(listenerHandshakeErrorsDesc, prometheus.CounterValue, float64(n), lc.addr, reason)
	}
	ch <- prometheus.MustNewConstMetric(listenerBacklogDropsDesc, prometheus.CounterValue, float64(m.Counters.BacklogDrops), lc.addr)
}
