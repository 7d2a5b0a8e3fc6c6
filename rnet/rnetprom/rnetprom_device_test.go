//go:build linux && cgo

package rnetprom_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnetprom"
	"github.com/stretchr/testify/require"
)

// TestRXECollectorFollowsConnections: scraped through promhttp, the
// collectors follow real connections on the lab's devices: the open
// connections of each end's device, the queue pairs, dials and accepts
// grow as connections open; the pinned bytes grow as their rings grow to
// carry a stream; everything held is back where it was once they close.
func TestRXECollectorFollowsConnections(t *testing.T) {
	pair := rdmatest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ln, err := (&rnet.ListenConfig{Backlog: 16}).Listen(ctx, "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	require.NoError(t, err)
	defer ln.Close()
	d := &rnet.Dialer{LocalAddr: &rnet.Addr{AddrPort: netip.AddrPortFrom(pair.Client, 0)}, Timeout: time.Minute}
	connect := func() (c, s *rnet.Conn) {
		c, err := d.DialContext(ctx, "rdma", ln.Addr().String())
		require.NoError(t, err)
		s, err = ln.AcceptRDMA()
		if err != nil {
			c.Close()
		}
		require.NoError(t, err)
		return c, s
	}
	// A first connection makes what the device's connections share (its
	// poll group) and the gauges of both devices.
	c, s := connect()
	clientInfo, err := c.Info()
	require.NoError(t, err)
	serverInfo, err := s.Info()
	require.NoError(t, err)
	c.Close()
	s.Close()
	scrapeNow := func() map[string]*dto.MetricFamily {
		return scrape(t, rnetprom.NewCollector(), rnetprom.NewListenerCollector(ln))
	}
	// open is the open RDMA connections on the devices of both ends.
	open := func(fs map[string]*dto.MetricFamily) float64 {
		n := value(t, fs, "rnet_connections", "transport", "rdma", "device", clientInfo.Device)
		if serverInfo.Device != clientInfo.Device {
			n += value(t, fs, "rnet_connections", "transport", "rdma", "device", serverInfo.Device)
		}
		return n
	}
	addr := ln.Addr().String()
	before := scrapeNow()

	const conns = 4
	var ends []*rnet.Conn
	defer func() {
		for _, e := range ends {
			e.Close()
		}
	}()
	for range conns {
		c, s := connect()
		ends = append(ends, c, s)
	}
	opened := scrapeNow()
	grew := func(name string, labels ...string) float64 {
		return value(t, opened, name, labels...) - value(t, before, name, labels...)
	}
	require.Equal(t, float64(2*conns), open(opened)-open(before), "open RDMA connections")
	require.Equal(t, float64(2*conns), grew("rnet_queue_pairs"), "queue pairs")
	require.Equal(t, float64(conns), grew("rnet_dials_total"), "dials")
	require.Equal(t, float64(conns), grew("rnet_accepts_total"), "accepts")
	require.Equal(t, float64(conns), grew("rnet_listener_accepted_total", "listener", addr), "the listener's accepts")
	require.Positive(t, grew("rnet_memory_regions"), "memory regions")
	require.Positive(t, grew("rnet_pinned_bytes"), "pinned bytes")
	require.Zero(t, value(t, opened, "rnet_pending_handshakes"), "pending handshakes with every connection accepted")

	// A stream of 4 MiB each way fills the rings (16 KiB when idle), so
	// they grow to their 128 KiB maximum and pin more.
	const size = 4 << 20
	for i := 0; i < len(ends); i += 2 {
		c, s := ends[i], ends[i+1]
		c.SetDeadline(time.Now().Add(time.Minute))
		s.SetDeadline(time.Now().Add(time.Minute))
		errs := make(chan error, 2)
		go func() { _, err := io.CopyN(c, zeros{}, size); errs <- err }()
		go func() { _, err := io.CopyN(s, zeros{}, size); errs <- err }()
		got, err := io.CopyN(io.Discard, s, size)
		require.NoError(t, err, "server read %d bytes", got)
		got, err = io.CopyN(io.Discard, c, size)
		require.NoError(t, err, "client read %d bytes", got)
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
	}
	carried := scrapeNow()
	require.Greater(t, value(t, carried, "rnet_pinned_bytes"), value(t, opened, "rnet_pinned_bytes"),
		"pinned bytes after the rings grew to carry the stream")
	require.Equal(t, float64(rnet.ReadMetrics().Gauges.PinnedBytes), value(t, carried, "rnet_pinned_bytes"))
	require.Equal(t, open(opened), open(carried), "open RDMA connections while carrying bytes")

	for _, e := range ends {
		require.NoError(t, e.Close())
	}
	ends = nil
	closed := scrapeNow()
	for _, name := range []string{"rnet_queue_pairs", "rnet_memory_regions", "rnet_pinned_bytes"} {
		require.Equal(t, value(t, before, name), value(t, closed, name), "%s after Close", name)
	}
	require.Equal(t, open(before), open(closed), "open RDMA connections after Close")
	require.Equal(t, float64(conns), value(t, closed, "rnet_dials_total")-value(t, before, "rnet_dials_total"),
		"dials, a counter, after Close")
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestRXECollectorAgreesWithRdmaTool: with 100 connections open (both ends
// in this process), the scrape's queue pairs, memory regions and pinned
// bytes are what `rdma resource show` lists for the process.
func TestRXECollectorAgreesWithRdmaTool(t *testing.T) {
	pair := rdmatest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ln, err := (&rnet.ListenConfig{Backlog: 200}).Listen(ctx, "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	require.NoError(t, err)
	defer ln.Close()
	d := &rnet.Dialer{LocalAddr: &rnet.Addr{AddrPort: netip.AddrPortFrom(pair.Client, 0)}, Timeout: time.Minute}
	const conns = 100
	var ends []*rnet.Conn
	defer func() {
		for _, e := range ends {
			e.Close()
		}
	}()
	for range conns {
		c, err := d.DialContext(ctx, "rdma", ln.Addr().String())
		require.NoError(t, err)
		ends = append(ends, c)
		s, err := ln.AcceptRDMA()
		require.NoError(t, err)
		ends = append(ends, s)
	}
	// rxe destroys queue pairs from a work queue, after the call that
	// destroyed them returned: another test's may still be listed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		fs := scrape(t, rnetprom.NewCollector())
		held := procstat.HeldRDMA(t)
		got := [3]float64{value(t, fs, "rnet_queue_pairs"), value(t, fs, "rnet_memory_regions"), value(t, fs, "rnet_pinned_bytes")}
		want := [3]float64{float64(held.QPs), float64(held.MRs), float64(held.PinnedBytes)}
		if got == want {
			require.GreaterOrEqual(t, got[0], float64(2*conns), "queue pairs with %d connections open", conns)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("with %d connections, the scrape shows %v queue pairs, memory regions and pinned bytes; the rdma tool lists %v", conns, got, want)
		}
		time.Sleep(20 * time.Millisecond) // between readings of a real condition
	}
}
