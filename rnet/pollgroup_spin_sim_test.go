package rnet

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/procstat"
)

// TestSimPollGroupOneSpinner: of two Reads on connections of one poll
// group, with spins of an hour, only the first spins; the second parks at
// once, and its data wakes it while the first still spins (the spinner's
// polls or the group's channel hand it over). The spinner's data then
// ends its spin.
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
	first := read(sn.servers[0])
	conntest.Until(t, "the first Read to spin", func() bool { return sn.servers[0].Stats().Spins == 1 })
	second := read(sn.servers[1])
	conntest.Until(t, "the second Read to park while the first spins", func() bool {
		for _, st := range procstat.Stacks() {
			if strings.Contains(st, "pollgroup.(*Member).Wait(") {
				return true
			}
		}
		return false
	})
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
