package rnet

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestConfigOutOfRange: values outside a field's range are an error from
// Dial and Listen that names the field and the range, before any device is
// touched; every documented value passes.
func TestConfigOutOfRange(t *testing.T) {
	bad := []struct {
		cfg   Config
		field string
	}{
		{Config{KeepAlive: time.Microsecond}, "KeepAlive"},
		{Config{KeepAlive: 999 * time.Millisecond}, "KeepAlive"},
		{Config{HandshakeTimeout: time.Millisecond}, "HandshakeTimeout"},
		{Config{SendBufferSize: 63}, "SendBufferSize"},
		{Config{SendBufferSize: -1}, "SendBufferSize"},
		{Config{RecvBufferSize: 2 << 30}, "RecvBufferSize"},
		{Config{IdleBufferSize: 32}, "IdleBufferSize"},
		{Config{IdleBufferSize: -1}, "IdleBufferSize"},
		{Config{SendQueueSize: 15}, "SendQueueSize"},
		{Config{RecvQueueSize: 1 << 20}, "RecvQueueSize"},
		{Config{InlineThreshold: 1 << 16}, "InlineThreshold"},
		{Config{TrafficClass: 256}, "TrafficClass"},
		{Config{AckTimeout: ackTimeoutUnit<<31 + 1}, "AckTimeout"},
		{Config{AckTimeout: 3 * time.Hour}, "AckTimeout"},
		{Config{RetryCount: 8}, "RetryCount"},
		{Config{RNRRetryCount: 8}, "RNRRetryCount"},
		{Config{RNRRetryCount: 1 << 20}, "RNRRetryCount"},
		{Config{ResumeTimeout: -1}, "ResumeTimeout"},
		{Config{Resume: true, ResumeTimeout: 99 * time.Millisecond}, "ResumeTimeout"},
		{Config{ResumeTimeout: time.Minute + 1}, "ResumeTimeout"},
	}
	// Every field that has values out of range has a case in bad; these
	// take any value.
	anyValue := map[string]bool{"BusyPoll": true, "BusyPollLimit": true, "Linger": true, "NoDelay": true, "Resume": true}
	for _, b := range bad {
		anyValue[b.field] = true
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		if !anyValue[f.Name] {
			t.Errorf("Config.%s has no out-of-range case here; add one, or list it as taking any value", f.Name)
		}
	}
	for _, b := range bad {
		check := func(op string, err error) {
			t.Helper()
			var ce *ConfigError
			var oe *net.OpError
			if !errors.As(err, &ce) || ce.Field != b.field || !errors.As(err, &oe) || oe.Op != op {
				t.Errorf("%s with %+v = %v, want a %s *net.OpError holding a *ConfigError for %s", op, b.cfg, err, op, b.field)
				return
			}
			if msg := err.Error(); !strings.Contains(msg, "Config."+b.field) || !strings.Contains(msg, "must be") {
				t.Errorf("%s error %q does not name the field and its range", op, msg)
			}
		}
		cfg := b.cfg
		_, err := (&Dialer{Config: &cfg}).DialContext(context.Background(), "rdma", "127.0.0.1:7471")
		check("dial", err)
		_, err = (&ListenConfig{Config: &cfg}).Listen(context.Background(), "rdma", "127.0.0.1:0")
		check("listen", err)
	}
	for _, good := range []Config{
		{},
		{KeepAlive: -1, HandshakeTimeout: -1, InlineThreshold: -1, BusyPoll: -1, BusyPollLimit: -1, Linger: -1},
		{KeepAlive: time.Second, HandshakeTimeout: 100 * time.Millisecond},
		{SendBufferSize: 64, RecvBufferSize: 1 << 30, SendQueueSize: 16, RecvQueueSize: 65534, InlineThreshold: 65535},
		{IdleBufferSize: 64}, {IdleBufferSize: 1 << 30},
		{BusyPoll: time.Minute},
		{TrafficClass: 255}, {TrafficClass: -1},
		{AckTimeout: ackTimeoutUnit << 31}, {AckTimeout: -1},
		{RetryCount: 7, RNRRetryCount: 1}, {RetryCount: -1, RNRRetryCount: -1},
		{Resume: true}, {Resume: true, ResumeTimeout: 100 * time.Millisecond}, {ResumeTimeout: time.Minute},
	} {
		if err := good.validate(); err != nil {
			t.Errorf("%+v: %v, want valid", good, err)
		}
	}
}

// TestSimConfigReportsEffectiveValues: Conn.Config reports every default
// applied, and off as negative.
func TestSimConfigReportsEffectiveValues(t *testing.T) {
	a, b := simPipe(t, &Config{KeepAlive: -1, InlineThreshold: -1, SendQueueSize: 64})
	defer a.Close()
	defer b.Close()
	got := a.Config()
	want := Config{SendBufferSize: 128 << 10, RecvBufferSize: 128 << 10, IdleBufferSize: 16 << 10,
		SendQueueSize: 64, RecvQueueSize: 384,
		InlineThreshold: -1, BusyPoll: 10 * time.Microsecond, BusyPollLimit: defaultBusyPollLimit,
		KeepAlive: -1, Linger: 10 * time.Second, HandshakeTimeout: 10 * time.Second}
	if got != want {
		t.Errorf("Config() = %+v\nwant       %+v", got, want)
	}
	c, d := simPipe(t, &Config{NoDelay: true})
	defer c.Close()
	defer d.Close()
	if !c.Config().NoDelay {
		t.Errorf("Config().NoDelay = false on a connection made with NoDelay")
	}
}

// TestResumeLowersDefaultRetryCount: with Resume, a RetryCount left at 0
// becomes 6, which Soft-RoCE does not take for "without limit"; one set
// stays as set, and without Resume the default stays 7.
func TestResumeLowersDefaultRetryCount(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want uint8
	}{
		{Config{}, 7},
		{Config{Resume: true}, 6},
		{Config{Resume: true, RetryCount: 7}, 7},
		{Config{Resume: true, RetryCount: 3}, 3},
		{Config{Resume: true, RetryCount: -1}, 0},
	} {
		if got := c.cfg.settings().transport.retryCount; got != c.want {
			t.Errorf("%+v: retry count %d, want %d", c.cfg, got, c.want)
		}
	}
}
