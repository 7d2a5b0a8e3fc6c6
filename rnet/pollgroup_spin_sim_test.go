package rnet

import (
	"io"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/pollgroup"
)

// TestSimPollGroupOneSpinner: of two Reads on connections of one poll
// group, with spins of an hour, only the first spins; the second parks at
// once, and its data wakes it (the spinner's polls or the group's channel
// hand it over; a spin that hands it over ends there). Both Reads return
// and the group's spinner's turn is free again.
func TestSimPollGroupOneSpinner(t *testing.T) {
	sn := simGroupPipes(t, 2, simGroupOptions{armedCQ: true, cfg: &Config{BusyPoll: time.Hour, BusyPollLimit: -1}})
	defer sn.closeAll()
	read := func(c *Conn) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := io.ReadFull(c, make([]byte, 1))
			done <- err
		}()
		return done
	}
	// The hook fires once the second Read's wait has found nothing ready
	// and is about to park: data written after it must wake a park.
	parking := make(chan struct{}, 1)
	t.Cleanup(pollgroup.SetTestHooks(&pollgroup.Hooks{
		Parking: func(m *pollgroup.Member) {
			if m == sn.serverQPs[1].member {
				select {
				case parking <- struct{}{}:
				default:
				}
			}
		},
	}))
	first := read(sn.servers[0])
	conntest.Until(t, "the first Read to spin", func() bool { return sn.servers[0].Stats().Spins == 1 })
	second := read(sn.servers[1])
	select {
	case <-parking:
	case <-time.After(time.Minute): // a failure bound only
		t.Fatal("the second Read did not park while the first spins")
	}
	if _, err := sn.clients[1].Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if _, err := sn.clients[0].Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if st := sn.servers[1].Stats(); st.Spins != 0 || st.SpinsDeferred != 1 || st.Parks == 0 {
		t.Fatalf("the second Read: %d spins, %d deferred, %d parks; want 0, 1 and at least 1", st.Spins, st.SpinsDeferred, st.Parks)
	}
	if sn.serverGr.Spinner() {
		t.Fatal("both Reads returned, and the group still has a spinner")
	}
}
