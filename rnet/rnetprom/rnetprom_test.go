package rnetprom_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnetprom"
	"github.com/rnet-dev/rnet/rnet/rnettest"
	"github.com/stretchr/testify/require"
)

// scrape registers cs in a registry of their own, serves it with promhttp
// and returns what one scrape read, by metric name.
func scrape(t *testing.T, cs ...prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range cs {
		require.NoError(t, reg.Register(c))
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// value is the value of the metric of family name whose labels are
// labels (name, value pairs).
func value(t *testing.T, families map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := families[name]
	require.True(t, ok, "no metric %s in the scrape", name)
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if want[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		}
	}
	require.Failf(t, "metric not found", "%s%v in %v", name, labels, f)
	return 0
}

// TestCollectorScrapedThroughPromhttp: with a connection open over the
// test fabric, the process's and the listener's collectors, registered in
// a pedantic registry and scraped through promhttp, report what
// rnet.ReadMetrics and the Listener's Metrics do, with the usual names
// and labels.
func TestCollectorScrapedThroughPromhttp(t *testing.T) {
	// The process's counters include what earlier tests in this binary
	// did (the device tests, in the lab): this test counts from here.
	acceptsBefore := rnet.ReadMetrics().Counters.Accepts
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", "10.0.0.2:7471")
	require.NoError(t, err)
	defer ln.Close()
	c, err := f.DialContext(context.Background(), "rdma", "10.0.0.2:7471")
	require.NoError(t, err)
	defer c.Close()
	s, err := ln.Accept()
	require.NoError(t, err)
	defer s.Close()

	families := scrape(t, rnetprom.NewCollector(), rnetprom.NewListenerCollector(ln))
	m := rnet.ReadMetrics()
	lm := ln.Metrics()

	require.Equal(t, float64(2), value(t, families, "rnet_connections", "transport", "rdma", "device", "simulated"))
	require.Equal(t, float64(m.Counters.Accepts), value(t, families, "rnet_accepts_total"))
	require.Equal(t, float64(acceptsBefore+1), value(t, families, "rnet_accepts_total"))
	require.Equal(t, float64(m.Counters.Dials), value(t, families, "rnet_dials_total"))
	require.Equal(t, float64(m.Gauges.PinnedBytes), value(t, families, "rnet_pinned_bytes"))
	require.Equal(t, float64(m.Gauges.QueuePairs), value(t, families, "rnet_queue_pairs"))
	require.Equal(t, float64(m.Gauges.MemoryRegions), value(t, families, "rnet_memory_regions"))
	require.Equal(t, float64(m.Gauges.PollGroups), value(t, families, "rnet_poll_groups"))
	require.Equal(t, float64(m.Gauges.PendingHandshakes), value(t, families, "rnet_pending_handshakes"))
	require.Equal(t, float64(m.Counters.PeersGone), value(t, families, "rnet_peers_gone_total"))
	for reason, n := range m.Counters.Fallbacks {
		label, err := reason.MarshalText()
		require.NoError(t, err)
		require.Equal(t, float64(n), value(t, families, "rnet_fallbacks_total", "reason", string(label)))
	}
	require.Len(t, families["rnet_fallbacks_total"].GetMetric(), len(m.Counters.Fallbacks))
	for reason, n := range m.Counters.HandshakeErrors {
		require.Equal(t, float64(n), value(t, families, "rnet_handshake_errors_total", "reason", reason))
	}
	require.Contains(t, m.Counters.HandshakeErrors, "busy")
	for cause, n := range m.Counters.Resumes {
		require.Equal(t, float64(n), value(t, families, "rnet_resumes_total", "cause", cause))
	}
	require.Len(t, families["rnet_resumes_total"].GetMetric(), 4)
	require.Equal(t, float64(m.Counters.ResumeFailures), value(t, families, "rnet_resume_failures_total"))
	require.Equal(t, m.Counters.ResumeTime.Seconds(), value(t, families, "rnet_resume_seconds_total"))
	require.Equal(t, float64(m.Counters.BytesResent), value(t, families, "rnet_resume_bytes_resent_total"))
	require.Equal(t, dto.MetricType_COUNTER, families["rnet_handshake_errors_total"].GetType())
	require.Equal(t, dto.MetricType_GAUGE, families["rnet_connections"].GetType())

	addr := ln.Addr().String()
	require.Equal(t, float64(lm.Counters.Accepted), value(t, families, "rnet_listener_accepted_total", "listener", addr))
	require.Equal(t, float64(1), value(t, families, "rnet_listener_accepted_total", "listener", addr))
	require.Equal(t, float64(0), value(t, families, "rnet_listener_backlog", "listener", addr))
	require.Equal(t, float64(0), value(t, families, "rnet_listener_refused_total", "listener", addr, "reason", "busy"))
	require.Equal(t, float64(0), value(t, families, "rnet_listener_handshake_errors_total", "listener", addr, "reason", "timeout"))

	c.Close()
	s.Close()
	families = scrape(t, rnetprom.NewCollector())
	require.Equal(t, float64(0), value(t, families, "rnet_connections", "transport", "rdma", "device", "simulated"),
		"a closed connection still counted as open")
}
