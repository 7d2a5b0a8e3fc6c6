//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// connectConfigs connects a dialler with dialCfg to a listener with
// listenCfg, from pair's client to its server, and returns both ends.
func connectConfigs(t *testing.T, pair rdmatest.Pair, dialCfg, listenCfg *Config) (client, server *Conn) {
	t.Helper()
	c, s, err := tryConnectConfigs(pair, dialCfg, listenCfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

// tryConnectConfigs is connectConfigs returning its error.
func tryConnectConfigs(pair rdmatest.Pair, dialCfg, listenCfg *Config) (client, server *Conn, err error) {
	ln, err := (&ListenConfig{Config: listenCfg}).Listen(context.Background(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	type res struct {
		c   *Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := ln.AcceptRDMA()
		acc <- res{c, err}
	}()
	d := &Dialer{Config: dialCfg, LocalAddr: &Addr{netip.AddrPortFrom(pair.Client, 0)}, Timeout: 30 * time.Second}
	c, err := d.Dial("rdma", ln.Addr().String())
	if err != nil {
		ln.Close()
		<-acc
		return nil, nil, err
	}
	r := <-acc
	if r.err != nil {
		c.Close()
		return nil, nil, r.err
	}
	return c, r.c, nil
}

// qpAttrs queries the queue pair under a device connection.
func qpAttrs(t *testing.T, c *Conn) verbs.QPAttrs {
	t.Helper()
	q, ok := c.conn.QueuePair().(*verbsQP)
	if !ok {
		t.Fatalf("%T is not a device connection", c.conn.QueuePair())
	}
	a, err := q.qp.Attrs()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// onSoftRoCE reports whether a device connection runs on Soft-RoCE (rxe).
func onSoftRoCE(t *testing.T, c *Conn) bool {
	t.Helper()
	devs, err := verbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	name := c.conn.QueuePair().(*verbsQP).device
	for _, d := range devs {
		if d.Name == name {
			return d.VendorID == verbs.VendorSoftRoCE
		}
	}
	t.Fatalf("device %s is not in the device list", name)
	return false
}

// TestRXETransportSettings: AckTimeout, RetryCount and RNRRetryCount reach
// the queue pairs as the connection manager passes them on. AckTimeout is
// each side's own, 33.5 ms by default on Soft-RoCE; the dialler's
// RetryCount sets both ends (the request carries it); each side's
// RNRRetryCount sets how often the other side resends to it. Negative
// AckTimeout leaves the timeout to the connection manager. Every
// connection is released after.
func TestRXETransportSettings(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	// An AckTimeout of fromCM is the connection manager's: not ours, and
	// not checked further; byDefault is the default on the device under
	// test (33.5 ms on Soft-RoCE, the connection manager's elsewhere).
	const fromCM, byDefault = 255, 254
	for _, tc := range []struct {
		name           string
		dial, listen   *Config
		client, server verbs.QPAttrs // with State RTS
	}{
		{
			name:   "defaults",
			client: verbs.QPAttrs{AckTimeout: byDefault, RetryCount: 7, RNRRetry: 7},
			server: verbs.QPAttrs{AckTimeout: byDefault, RetryCount: 7, RNRRetry: 7},
		},
		{
			name: "each side its own",
			// 10 ms needs 4.096 µs × 2^12 (16.8 ms); 100 ms 2^15 (134 ms).
			dial:   &Config{AckTimeout: 10 * time.Millisecond, RetryCount: 3, RNRRetryCount: 5},
			listen: &Config{AckTimeout: 100 * time.Millisecond, RetryCount: 6, RNRRetryCount: 2},
			client: verbs.QPAttrs{AckTimeout: 12, RetryCount: 3, RNRRetry: 2},
			server: verbs.QPAttrs{AckTimeout: 15, RetryCount: 3, RNRRetry: 5},
		},
		{
			name:   "none",
			dial:   &Config{RetryCount: -1, RNRRetryCount: -1},
			listen: &Config{RNRRetryCount: -1},
			client: verbs.QPAttrs{AckTimeout: byDefault, RetryCount: 0, RNRRetry: 0},
			server: verbs.QPAttrs{AckTimeout: byDefault, RetryCount: 0, RNRRetry: 0},
		},
		{
			name:   "connection manager's timeout",
			dial:   &Config{AckTimeout: -1},
			listen: &Config{AckTimeout: -1},
			client: verbs.QPAttrs{AckTimeout: fromCM, RetryCount: 7, RNRRetry: 7},
			server: verbs.QPAttrs{AckTimeout: fromCM, RetryCount: 7, RNRRetry: 7},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
			c, s := connectConfigs(t, pair, tc.dial, tc.listen)
			deviceDefault := uint8(fromCM)
			if onSoftRoCE(t, c) {
				deviceDefault = softRoCEAckTimeout
			}
			for _, end := range []struct {
				name string
				conn *Conn
				want verbs.QPAttrs
			}{{"client", c, tc.client}, {"server", s, tc.server}} {
				got := qpAttrs(t, end.conn)
				want := end.want
				want.State, want.MinRNRTimer = verbs.QPRTS, got.MinRNRTimer
				if want.AckTimeout == byDefault {
					want.AckTimeout = deviceDefault
				}
				if want.AckTimeout == fromCM {
					if got.AckTimeout == 0 || got.AckTimeout == softRoCEAckTimeout {
						t.Errorf("%s: ACK timeout %d with the connection manager's choice", end.name, got.AckTimeout)
					}
					want.AckTimeout = got.AckTimeout
				}
				if got != want {
					t.Errorf("%s queue pair: %+v, want %+v", end.name, got, want)
				}
				t.Logf("%s queue pair: %+v (ACK timeout %v)", end.name, got, ackTimeoutUnit<<got.AckTimeout)
			}
			if _, err := c.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(s, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
			c.Close()
			s.Close()
			checkReleased(t, gor0, fds0, res0)
		})
	}
}

// TestIWARPTransportSettingsIgnored: iWARP has no ACK timeout or retry
// counts of its own (TCP retransmits), so the settings connect there
// without an error and change nothing.
func TestIWARPTransportSettingsIgnored(t *testing.T) {
	pair := rdmatest.RequireIWARP(t)
	cfg := &Config{AckTimeout: 10 * time.Millisecond, RetryCount: 2, RNRRetryCount: 1}
	c, s := connectConfigs(t, pair, cfg, cfg)
	defer c.Close()
	defer s.Close()
	if _, err := c.Write([]byte("over iWARP")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "over iWARP" {
		t.Fatalf("got %q, %v", buf, err)
	}
}

// TestTransportSettingsRejected: Dial and Listen refuse a transport setting
// out of range before they touch a device, with an error that names the
// field and its range.
func TestTransportSettingsRejected(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want []string
	}{
		{Config{AckTimeout: 3 * time.Hour}, []string{"Config.AckTimeout", "3h0m0s", "at most 2h26m36.093022208s", "2^31"}},
		{Config{RetryCount: 8}, []string{"Config.RetryCount", "8", "1 to 7"}},
		{Config{RNRRetryCount: 100}, []string{"Config.RNRRetryCount", "100", "1 to 7"}},
		{Config{TrafficClass: 300}, []string{"Config.TrafficClass", "300", "1 to 255"}},
	} {
		d := &Dialer{Config: &tc.cfg}
		_, err := d.Dial("rdma", "10.77.0.2:7471")
		lc := &ListenConfig{Config: &tc.cfg}
		ln, lerr := lc.Listen(context.Background(), "rdma", "10.77.0.2:0")
		if ln != nil {
			ln.Close()
		}
		for op, err := range map[string]error{"Dial": err, "Listen": lerr} {
			var oe *net.OpError
			if !errors.As(err, &oe) {
				t.Errorf("%s with %+v: %v, want a *net.OpError", op, tc.cfg, err)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s with %+v: %q lacks %q", op, tc.cfg, err, w)
				}
			}
		}
	}
}
