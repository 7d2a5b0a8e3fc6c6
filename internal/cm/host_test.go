package cm

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

func TestEventErrors(t *testing.T) {
	for _, c := range []struct {
		ev   Event
		want []string
		is   error
	}{
		{Event{Type: EventAddrError, Status: -110, Addr: "10.77.0.99:7471"}, []string{"rdma_resolve_addr 10.77.0.99:7471: connection timed out"}, syscall.ETIMEDOUT},
		{Event{Type: EventRouteError, Status: -110, Addr: "10.77.0.2:7471"}, []string{"rdma_resolve_route 10.77.0.2:7471: connection timed out"}, syscall.ETIMEDOUT},
		{Event{Type: EventUnreachable, Status: -110, Addr: "10.77.0.2:1"}, []string{"rdma_connect 10.77.0.2:1", "unreachable"}, ErrUnreachable},
		{Event{Type: EventRejected, Status: 8, Addr: "10.77.0.2:1"}, []string{"nothing listens", "reason 8"}, syscall.ECONNREFUSED},
		{Event{Type: EventRejected, Status: 28, Addr: "10.77.0.2:1"}, []string{"rejected by the peer application", "reason 28"}, syscall.ECONNREFUSED},
		{Event{Type: EventRejected, Status: -111, Addr: "10.78.0.2:1"}, []string{"connection refused"}, syscall.ECONNREFUSED},
		{Event{Type: EventConnectError, Status: -22}, []string{"rdma_connect", "CONNECT_ERROR event", "invalid argument"}, syscall.EINVAL},
		{Event{Type: EventDeviceRemoval}, []string{"device removed"}, ErrDeviceRemoved},
	} {
		err := c.ev.Err()
		if err == nil {
			t.Errorf("%v: no error", c.ev.Type)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q lacks %q", c.ev.Type, err, w)
			}
		}
		if !errors.Is(err, c.is) {
			t.Errorf("%v: %v is not %v", c.ev.Type, err, c.is)
		}
	}
	for _, ok := range []EventType{EventAddrResolved, EventRouteResolved, EventEstablished, EventDisconnected, EventConnectRequest, EventTimewaitExit, EventAddrChange} {
		if err := (&Event{Type: ok}).Err(); err != nil {
			t.Errorf("%v gave %v", ok, err)
		}
	}
	var re *RejectError
	if err := (&Event{Type: EventRejected, Status: 28}).Err(); !errors.As(err, &re) || !re.ByApplication() || re.NoListener() {
		t.Errorf("reason 28 not an application reject: %v", err)
	}
	if EventTimewaitExit.String() != "TIMEWAIT_EXIT" || EventType(99).String() != "EventType(99)" {
		t.Error("EventType names")
	}
}
