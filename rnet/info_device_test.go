//go:build linux && cgo

package rnet

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// TestRXEFabricSettings: a dialler's TrafficClass reaches both queue pairs
// and its AckTimeout its own (ibv_query_qp shows them), a Listener's
// TrafficClass is not used, Conn.Info reports what is in effect on both
// ends, and every connection is released after.
func TestRXEFabricSettings(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	const dscpAF31 = 26 << 2 // a DSCP a lossless class is commonly mapped from
	for _, tc := range []struct {
		name               string
		dial, listen       *Config
		clientTC, serverTC int
	}{
		{name: "defaults", clientTC: 0, serverTC: 0},
		{name: "dialler's", dial: &Config{TrafficClass: dscpAF31, AckTimeout: 10 * time.Millisecond}, clientTC: dscpAF31, serverTC: dscpAF31},
		// The accepted queue pair takes the path the request carries.
		{name: "listener's unused", listen: &Config{TrafficClass: 72}, clientTC: 0, serverTC: 0},
		{name: "dialler's over listener's", dial: &Config{TrafficClass: 106}, listen: &Config{TrafficClass: 72}, clientTC: 106, serverTC: 106},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
			c, s := connectConfigs(t, pair, tc.dial, tc.listen)
			for _, end := range []struct {
				name string
				conn *Conn
				tc   int
			}{{"client", c, tc.clientTC}, {"server", s, tc.serverTC}} {
				info, err := end.conn.Info()
				if err != nil {
					t.Fatalf("%s: Info: %v", end.name, err)
				}
				t.Logf("%s: %+v", end.name, info)
				path, err := end.conn.conn.QueuePair().(*verbsQP).qp.Path()
				if err != nil {
					t.Fatal(err)
				}
				attrs := qpAttrs(t, end.conn)
				if int(path.TrafficClass) != end.tc || info.TrafficClass != end.tc {
					t.Errorf("%s: traffic class %d on the queue pair, %d in Info, want %d", end.name, path.TrafficClass, info.TrafficClass, end.tc)
				}
				if want := ackTimeoutUnit << attrs.AckTimeout; info.AckTimeout != want {
					t.Errorf("%s: Info.AckTimeout %v, the queue pair's %v", end.name, info.AckTimeout, want)
				}
				if info.Transport != "RoCE" || info.Device != end.conn.conn.QueuePair().(*verbsQP).device || info.Port != 1 ||
					!info.GID.IsValid() || info.PathMTU < 256 || info.MaxInlineData < info.InlineThreshold ||
					info.SendRingSize == 0 || info.RecvRingSize == 0 || info.CreditWindow == 0 ||
					info.RetryCount != int(attrs.RetryCount) || info.RNRRetryCount != int(attrs.RNRRetry) {
					t.Errorf("%s: Info %+v is not what the device reports (%+v, %+v)", end.name, info, path, attrs)
				}
			}
			ci, _ := c.Info()
			si, _ := s.Info()
			if ci.QPNumber == 0 || ci.RemoteQPNumber != si.QPNumber || si.RemoteQPNumber != ci.QPNumber {
				t.Errorf("QP numbers: client %d to %d, server %d to %d; want each end's remote to be the other's", ci.QPNumber, ci.RemoteQPNumber, si.QPNumber, si.RemoteQPNumber)
			}
			checkListedQP(t, ci)
			if tc.dial != nil && tc.dial.AckTimeout != 0 {
				if a := qpAttrs(t, c); a.AckTimeout != 12 { // 10 ms needs 4.096 µs × 2^12
					t.Errorf("client ACK timeout exponent %d, want 12", a.AckTimeout)
				}
			}
			if _, err := c.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(s, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
			c.Close()
			s.Close()
			if _, err := c.Info(); err == nil {
				t.Error("Info after Close: no error")
			}
			checkReleased(t, gor0, fds0, res0)
		})
	}
}

// TestIWARPTrafficClass: siw takes a TrafficClass without an error (the
// connection is TCP's, which the setting does not reach), and Info reports
// the transport; what the queue pair shows is logged, not asserted.
func TestIWARPTrafficClass(t *testing.T) {
	pair := rdmatest.RequireIWARP(t)
	cfg := &Config{TrafficClass: 26 << 2}
	c, s, err := tryConnectConfigs(pair, cfg, cfg)
	if err != nil && errors.Is(err, syscall.EINVAL) && strings.Contains(err.Error(), "CONNECT_ERROR event") {
		// siw's occasional CONNECT_ERROR (see warmUp): the connect is
		// not what this test checks, so it tries once more.
		t.Logf("connect failed, trying again: %v", err)
		c, s, err = tryConnectConfigs(pair, cfg, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer s.Close()
	info, err := c.Info()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("client over iWARP: %+v", info)
	if info.Transport != "iWARP" || info.PathMTU != 0 || info.AckTimeout != 0 {
		t.Errorf("Info %+v: want transport iWARP, no path MTU, no ACK timeout", info)
	}
	if _, err := c.Write([]byte("tos")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, make([]byte, 3)); err != nil {
		t.Fatal(err)
	}
}

// checkListedQP checks that `rdma resource show qp` lists info's queue pair
// with its peer's number, as an operator would look it up.
func checkListedQP(t *testing.T, info ConnInfo) {
	t.Helper()
	out, err := exec.Command("rdma", "-j", "resource", "show", "qp", "lqpn", strconv.Itoa(int(info.QPNumber))).Output()
	if err != nil {
		t.Fatalf("rdma resource show qp: %v", err)
	}
	var qps []struct {
		Device string `json:"ifname"`
		LQPN   uint32 `json:"lqpn"`
		RQPN   uint32 `json:"rqpn"`
	}
	if err := json.Unmarshal(out, &qps); err != nil {
		t.Fatalf("rdma resource show qp: %v in %s", err, out)
	}
	for _, q := range qps {
		if q.LQPN == info.QPNumber && q.Device == info.Device {
			if q.RQPN != info.RemoteQPNumber {
				t.Errorf("rdma lists QP %d on %s with rqpn %d; Info says %d", q.LQPN, q.Device, q.RQPN, info.RemoteQPNumber)
			}
			return
		}
	}
	t.Errorf("rdma resource show qp does not list QP %d on %s: %s", info.QPNumber, info.Device, out)
}
