package rnet

import (
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestSimInfo: over the test fabric, Info reports the settings and ring
// sizes in effect and no device, and fails with net.ErrClosed after Close.
func TestSimInfo(t *testing.T) {
	c, s := simPipe(t, &Config{SendBufferSize: 256 << 10, RecvBufferSize: 64 << 10, IdleBufferSize: 4096, SendQueueSize: 64, RecvQueueSize: 32})
	defer s.Close()
	info, err := c.Info()
	if err != nil {
		t.Fatal(err)
	}
	want := ConnInfo{
		Transport:       "simulated",
		InlineThreshold: 48,
		SendRingSize:    4096, SendBufferSize: 256 << 10,
		RecvRingSize: 4096, RecvBufferSize: 64 << 10,
		SendQueueSize: 64, CreditWindow: 32, RecvQueueSize: 32,
	}
	if info != want {
		t.Errorf("Info = %+v, want %+v", info, want)
	}
	nd, ns := simPipe(t, &Config{NoDelay: true})
	defer ns.Close()
	defer nd.Close()
	if info, err := nd.Info(); err != nil || !info.NoDelay {
		t.Errorf("Info with Config.NoDelay: NoDelay %v, error %v; want true", info.NoDelay, err)
	}
	c.Close()
	if _, err := c.Info(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Info after Close: %v, want net.ErrClosed", err)
	}
}

// jsonKeys lists the object keys in v, a decoded JSON value, at every depth.
func jsonKeys(v any) []string {
	var keys []string
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			keys = append(keys, k)
			keys = append(keys, jsonKeys(e)...)
		}
	case []any:
		for _, e := range v {
			keys = append(keys, jsonKeys(e)...)
		}
	}
	return keys
}

// TestInfoAndStatsJSON: ConnInfo, Stats, FallbackStats, Config, the
// metrics and the sockets marshal with snake_case keys at every depth, a
// FallbackReason as its label name, and back.
func TestInfoAndStatsJSON(t *testing.T) {
	for _, v := range []any{ConnInfo{QPNumber: 7, PathMTU: 1024}, Stats{CQPolls: 3}, FallbackStats{RDMA: 1, TCP: map[FallbackReason]uint64{FallbackNoRoute: 2}},
		Config{KeepAlive: time.Second, RNRRetryCount: 7}, Metrics{}, ListenerMetrics{}, Sockets{Connections: []ConnSocket{{}}, Listeners: []ListenerSocket{{}}}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var decoded any
		if err := json.Unmarshal(b, &decoded); err != nil {
			t.Fatal(err)
		}
		for _, k := range jsonKeys(decoded) {
			if strings.ToLower(k) != k || strings.Contains(k, "-") {
				t.Errorf("%T: key %q is not snake_case", v, k)
			}
		}
	}
	b, _ := json.Marshal(FallbackStats{RDMA: 1, TCP: map[FallbackReason]uint64{FallbackNoRoute: 2, FallbackPeerTCP: 3}})
	if want := `{"rdma":1,"tcp":{"no_route":2,"peer_tcp":3}}`; string(b) != want {
		t.Errorf("FallbackStats = %s, want %s", b, want)
	}
	var back FallbackStats
	if err := json.Unmarshal(b, &back); err != nil || back.TCP[FallbackPeerTCP] != 3 || back.TCP[FallbackNoRoute] != 2 {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	for r := FallbackNoDevice; r <= FallbackPeerTCP; r++ {
		text, err := r.MarshalText()
		var got FallbackReason
		if err != nil || got.UnmarshalText(text) != nil || got != r {
			t.Errorf("%v: MarshalText %q, %v; back %v", r, text, err, got)
		}
	}
	if text, err := FallbackReason(0).MarshalText(); string(text) != "none" || err != nil {
		t.Errorf("FallbackReason(0).MarshalText() = %q, %v; want none", text, err)
	}
	if _, err := FallbackReason(99).MarshalText(); err == nil {
		t.Error("FallbackReason(99) marshalled")
	}
	if s := DialFallbackStats(); len(s.TCP) != int(FallbackRDMAError) {
		t.Errorf("DialFallbackStats has %d reasons, want every reason a dial can have (%d)", len(s.TCP), FallbackRDMAError)
	}
}
