package rnet

import (
	"net/netip"
	"testing"
	"time"
)

// The listener's end of a resumable connection waits for its dialer as
// long as its table keeps the token, not its own ResumeTimeout: it may
// see the path fail seconds before the dialer does.
func TestResumeListenerWaitsTableLifetime(t *testing.T) {
	on := (&Config{Resume: true, ResumeTimeout: 8 * time.Second}).settings()
	lr, err := newResumeListener(on, netip.MustParseAddrPort("[::]:7471"), false, noMemlockLimit, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := simNegotiate(on, on, lr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBoth(t, h)
	if got, want := h.listener.conn.Settings().ResumeTimeout, lr.table.Lifetime(); got != want {
		t.Errorf("listener: waits for its dialer %v, want the table's lifetime, %v", got, want)
	}
}
