package rnet

import (
	"strings"
	"testing"
	"time"
)

// TestTransportSettings: AckTimeout becomes the smallest exponent whose
// 4.096 µs × 2^n is at least it, zero fields their defaults, negative ones
// the connection manager's choice or no retries, and values out of range
// an error that names the field and the range.
func TestTransportSettings(t *testing.T) {
	most := ackTimeoutUnit << 31
	for _, tc := range []struct {
		cfg     Config
		want    transportSettings
		wantErr []string
	}{
		{cfg: Config{}, want: transportSettings{0, false, 7, 7, 0, false, false}},
		{cfg: Config{AckTimeout: -1}, want: transportSettings{0, true, 7, 7, 0, false, false}},
		{cfg: Config{AckTimeout: time.Nanosecond}, want: transportSettings{1, false, 7, 7, 0, false, false}},
		{cfg: Config{AckTimeout: 8192 * time.Nanosecond}, want: transportSettings{1, false, 7, 7, 0, false, false}},
		{cfg: Config{AckTimeout: 8193 * time.Nanosecond}, want: transportSettings{2, false, 7, 7, 0, false, false}},
		{cfg: Config{AckTimeout: 67 * time.Millisecond}, want: transportSettings{14, false, 7, 7, 0, false, false}},
		{cfg: Config{AckTimeout: 67108864 * time.Nanosecond}, want: transportSettings{14, false, 7, 7, 0, false, false}},
		{cfg: Config{AckTimeout: 67108865 * time.Nanosecond}, want: transportSettings{15, false, 7, 7, 0, false, false}},
		{cfg: Config{AckTimeout: most}, want: transportSettings{31, false, 7, 7, 0, false, false}},
		{cfg: Config{AckTimeout: most + 1}, wantErr: []string{"Config.AckTimeout is 2h26m36.093022209s", "must be", "at most 2h26m36.093022208s", "negative"}},
		{cfg: Config{RetryCount: -5, RNRRetryCount: 3}, want: transportSettings{0, false, 0, 3, 0, false, false}},
		{cfg: Config{RetryCount: 1, RNRRetryCount: -1}, want: transportSettings{0, false, 1, 0, 0, false, false}},
		{cfg: Config{RetryCount: 8}, wantErr: []string{"Config.RetryCount is 8", "1 to 7"}},
		{cfg: Config{RNRRetryCount: 8}, wantErr: []string{"Config.RNRRetryCount is 8", "1 to 7"}},
		{cfg: Config{TrafficClass: 106}, want: transportSettings{0, false, 7, 7, 106, true, false}},
		{cfg: Config{TrafficClass: 255}, want: transportSettings{0, false, 7, 7, 255, true, false}},
		{cfg: Config{TrafficClass: -1}, want: transportSettings{0, false, 7, 7, 0, true, false}},
		{cfg: Config{TrafficClass: 256}, wantErr: []string{"Config.TrafficClass is 256", "1 to 255", "TOS byte", "negative for 0"}},
	} {
		got, err := tc.cfg.transportSettings()
		if tc.wantErr != nil {
			if err == nil {
				t.Errorf("%+v: no error", tc.cfg)
				continue
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%+v: %q lacks %q", tc.cfg, err, w)
				}
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: %+v, %v; want %+v", tc.cfg, got, err, tc.want)
		}
		// settings carries them, and a nil Config means the defaults.
		if s := (&tc.cfg).settings(); s.transport != tc.want || s.transportErr != nil {
			t.Errorf("%+v: settings carry %+v, %v", tc.cfg, s.transport, s.transportErr)
		}
	}
	var nilCfg *Config
	if s := nilCfg.settings(); s.transport != (transportSettings{0, false, 7, 7, 0, false, false}) {
		t.Errorf("nil Config: %+v", s.transport)
	}
}

// TestAckTimeoutOn: the default ACK timeout is 33.5 ms on Soft-RoCE, 134 ms
// on a path a resume built, and the connection manager's elsewhere; one
// asked for, or the connection manager's asked for, holds on every device
// and every path.
func TestAckTimeoutOn(t *testing.T) {
	for _, tc := range []struct {
		cfg                         Config
		softRoCE, resumed, hardware uint8
	}{
		{Config{}, softRoCEAckTimeout, softRoCEResumedAckTimeout, 0},
		{Config{AckTimeout: -1}, 0, 0, 0},
		{Config{AckTimeout: time.Second}, 18, 18, 18},
		{Config{AckTimeout: time.Microsecond}, 1, 1, 1},
	} {
		ts, err := tc.cfg.transportSettings()
		if err != nil {
			t.Fatal(err)
		}
		if got := ts.ackTimeoutOn(true); got != tc.softRoCE {
			t.Errorf("%v on Soft-RoCE: %d, want %d", tc.cfg.AckTimeout, got, tc.softRoCE)
		}
		if got := ts.forResumedPath().ackTimeoutOn(true); got != tc.resumed {
			t.Errorf("%v on Soft-RoCE, a resumed path: %d, want %d", tc.cfg.AckTimeout, got, tc.resumed)
		}
		if got := ts.ackTimeoutOn(false); got != tc.hardware {
			t.Errorf("%v elsewhere: %d, want %d", tc.cfg.AckTimeout, got, tc.hardware)
		}
		if got := ts.forResumedPath().ackTimeoutOn(false); got != tc.hardware {
			t.Errorf("%v elsewhere, a resumed path: %d, want %d", tc.cfg.AckTimeout, got, tc.hardware)
		}
	}
	if ackTimeoutUnit<<softRoCEAckTimeout != 33554432*time.Nanosecond {
		t.Errorf("the Soft-RoCE default is %v, not the 33.5 ms documented", ackTimeoutUnit<<softRoCEAckTimeout)
	}
	if ackTimeoutUnit<<softRoCEResumedAckTimeout != 134217728*time.Nanosecond {
		t.Errorf("the Soft-RoCE default on a resumed path is %v, not the 134 ms documented", ackTimeoutUnit<<softRoCEResumedAckTimeout)
	}
}
