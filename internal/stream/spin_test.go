package stream

import (
	"io"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/simqp"
)

// The adaptive spin follows short waits, stays at BusyPoll for long ones,
// and never spins when busy polling is off.
func TestSpinWindow(t *testing.T) {
	c := &Conn{set: testSettings(nil)}
	busy, limit := c.set.BusyPoll, c.set.BusyPollLimit
	var w waitEstimate
	if got := window(c, &w); got != busy {
		t.Fatalf("no history: window %v, want BusyPoll's %v", got, busy)
	}
	for range 64 {
		w.observe(100*time.Microsecond, window(c, &w), limit)
	}
	if got := window(c, &w); got < 190*time.Microsecond || got > 200*time.Microsecond {
		t.Fatalf("waits of 100µs: window %v, want about 200µs", got)
	}
	// One wait in eight parked (5 ms): the window must still cover the
	// short ones, or spinning collapses into parking.
	for i := range 64 {
		d := 100 * time.Microsecond
		if i%8 == 0 {
			d = 5 * time.Millisecond
		}
		w.observe(d, window(c, &w), limit)
	}
	if got := window(c, &w); got < 200*time.Microsecond || got > limit {
		t.Fatalf("mostly 100µs waits, some 5ms: window %v, want 200µs..%v", got, limit)
	}
	for range 64 {
		w.observe(5*time.Millisecond, window(c, &w), limit)
	}
	if got := window(c, &w); got != busy {
		t.Fatalf("waits of 5ms (past the %v limit): window %v, want BusyPoll's %v", limit, got, busy)
	}

	off := &Conn{set: testSettings(func(s *Settings) { s.BusyPoll = 0 })}
	var short waitEstimate
	for range 64 {
		short.observe(50*time.Microsecond, limit, limit)
	}
	if got := window(off, &short); got != 0 {
		t.Fatalf("BusyPoll off: window %v, want 0", got)
	}
	fixed := &Conn{set: testSettings(func(s *Settings) { s.BusyPollLimit, s.BusyPollLimitMax = 0, 0 })}
	for range 2 * probeEvery {
		if got := window(fixed, &w); got != busy {
			t.Fatalf("BusyPollLimit off: window %v, want BusyPoll's %v, and no probes", got, busy)
		}
	}
}

// A connection whose spinning went off after slow replies turns it back on
// when replies are quick again, although every wait of its own parks (and
// so lasts as long as a park, not as long as the reply took): every
// probeEvery-th wait spins the whole limit, and one that catches its reply
// restarts the average.
func TestSpinWindowRecovers(t *testing.T) {
	c := &Conn{set: testSettings(nil)}
	busy, limit := c.set.BusyPoll, c.set.BusyPollLimit
	var w waitEstimate
	for range 64 {
		w.observe(time.Millisecond, window(c, &w), limit)
	}
	if !w.spinOff(limit) {
		t.Fatalf("after 1ms waits spinning is still on (average %v)", w.avg)
	}
	// Replies are quick again, but every wait that spins only BusyPoll
	// parks and takes a park's 700µs; a probe catches the reply in 60µs.
	probes := 0
	for i := range 4 * probeEvery {
		win := window(c, &w)
		d := 700 * time.Microsecond
		switch {
		case win == limit:
			probes++
			d = 60 * time.Microsecond
		case win != busy:
			if win < 100*time.Microsecond || win > limit {
				t.Fatalf("wait %d after %d probe(s): window %v, want about 120µs", i, probes, win)
			}
			return // spinning is back
		}
		w.observe(d, win, limit)
	}
	t.Fatalf("spinning stayed off for %d waits with quick replies (%d probes, average %v)", 4*probeEvery, probes, w.avg)
}

// A probe whose reply did not come within the limit keeps spinning off,
// and the waits between probes spin only BusyPoll: a peer that stays slow
// costs one long spin per probeEvery waits.
func TestSpinWindowProbesStaySparse(t *testing.T) {
	c := &Conn{set: testSettings(nil)}
	busy, limit := c.set.BusyPoll, c.set.BusyPollLimit
	var w waitEstimate
	var probes []int
	for i := range 64 + 8*probeEvery {
		win := window(c, &w)
		if win == limit {
			probes = append(probes, i)
		} else if w.spinOff(limit) && win != busy {
			t.Fatalf("spinning off: window %v, want BusyPoll's %v or a probe's %v", win, busy, limit)
		}
		w.observe(2*time.Millisecond, win, limit)
	}
	if !w.spinOff(limit) {
		t.Fatalf("2ms waits turned spinning on (average %v)", w.avg)
	}
	// The gaps double from 1 to probeEvery, then stay there.
	for k := 1; k < len(probes); k++ {
		want := min(1<<(k-1), probeEvery)
		if gap := probes[k] - probes[k-1]; gap != want {
			t.Fatalf("probes at waits %v: gap %d after probe %d, want %d", probes, gap, k, want)
		}
	}
	if len(probes) < 8 {
		t.Fatalf("only %d probes in %d waits: %v", len(probes), 64+8*probeEvery, probes)
	}
}

// window is the spin window alone.
func window(c *Conn, w *waitEstimate) time.Duration {
	d, _ := w.window(&c.set)
	return d
}

// Once parks are measured, a wait spins at least as long as a park costs,
// up to the ceiling, except every measureEvery-th wait, which spins only
// twice the average so that its park, if any, measures the cost again.
// Only those waits are measured; the estimate is the median of the last
// parkSamples, so a few late replies do not inflate it.
func TestSpinWindowCoversParkCost(t *testing.T) {
	c := &Conn{set: testSettings(nil)}
	var w waitEstimate
	for range 64 {
		w.observe(60*time.Microsecond, window(c, &w), w.limit(&c.set))
	}
	short := window(c, &w)
	if short < 110*time.Microsecond || short > 120*time.Microsecond {
		t.Fatalf("waits of 60µs: window %v, want about 120µs", short)
	}
	for i := range parkSamplesMin {
		if _, measure := w.window(&c.set); !measure {
			t.Fatalf("wait %d: a park would not be measured, with %d parks measured", i, i)
		}
		w.observePark(700 * time.Microsecond)
	}
	if got := w.limit(&c.set); got != 700*time.Microsecond {
		t.Fatalf("parks of 700µs: limit %v, want 700µs", got)
	}
	measured := 0
	for i := range 4 * measureEvery {
		win, measure := w.window(&c.set)
		switch {
		case measure:
			measured++
			if win > 2*w.avg {
				t.Fatalf("wait %d measures parks but spins %v, past twice the average %v", i, win, w.avg)
			}
		case win != 700*time.Microsecond:
			t.Fatalf("wait %d: window %v, want the park's 700µs", i, win)
		}
		w.observe(60*time.Microsecond, win, w.limit(&c.set))
	}
	if measured != 4 {
		t.Fatalf("%d of %d waits measured parks, want 4", measured, 4*measureEvery)
	}

	// Late replies make some parks look long; they do not move the estimate.
	for _, d := range []time.Duration{5000, 600, 650, 700, 20000, 640, 660, 680} {
		w.observePark(d * time.Microsecond)
	}
	if w.park != 680*time.Microsecond {
		t.Fatalf("parks of 600-700µs and two of 5 and 20 ms: cost %v, want their median, 680µs", w.park)
	}
	for range parkSamples {
		w.observePark(10 * time.Millisecond)
	}
	if got, win := w.limit(&c.set), window(c, &w); got != c.set.BusyPollLimitMax || win > c.set.BusyPollLimitMax {
		t.Fatalf("parks of 10ms: limit %v and window %v, want at most the ceiling %v", got, win, c.set.BusyPollLimitMax)
	}

	// Where a park is cheaper than twice the average, nothing changes.
	for range parkSamples {
		w.observePark(20 * time.Microsecond)
	}
	if got, win := w.limit(&c.set), window(c, &w); got != c.set.BusyPollLimit || win != 2*w.avg {
		t.Fatalf("parks of 20µs: limit %v and window %v, want %v and twice the average, %v", got, win, c.set.BusyPollLimit, 2*w.avg)
	}

	// A fixed limit stays fixed.
	fixed := &Conn{set: testSettings(func(s *Settings) { s.BusyPollLimit, s.BusyPollLimitMax = 300*time.Microsecond, 300*time.Microsecond })}
	for range parkSamples {
		w.observePark(700 * time.Microsecond)
	}
	if got, win := w.limit(&fixed.set), window(fixed, &w); got != 300*time.Microsecond || win > got {
		t.Fatalf("BusyPollLimit 300µs, parks of 700µs: limit %v and window %v, want 300µs", got, win)
	}
}

// Read measures its parks: a reply wait that spun and then parked until
// the reply came counts toward the cost of a park, until enough are known;
// after that only every measureEvery-th wait does, so that waits whose
// window already covers a park cannot ratchet the estimate up.
func TestSimReadMeasuresParks(t *testing.T) {
	client, server, cqp := parkSignallingPipe(t)

	const rounds = 200
	errc := make(chan error, 1)
	go func() {
		// Echo each request, but only once the client waits for it on
		// the completion channel.
		buf := make([]byte, 64)
		for range rounds {
			if _, err := io.ReadFull(server, buf); err != nil {
				errc <- err
				return
			}
			<-cqp.Waiting
			if _, err := server.Write(buf); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	req, resp := make([]byte, 64), make([]byte, 64)
	roundTrip := func() {
		select { // a signal left over from an earlier wait
		case <-cqp.Waiting:
		default:
		}
		if _, err := client.Write(req); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, resp); err != nil {
			t.Fatal(err)
		}
	}
	done := 0
	for ; done < rounds && client.readWait.nParked < parkSamplesMin; done++ {
		roundTrip()
	}
	if client.readWait.nParked < parkSamplesMin || client.readWait.park <= 0 {
		t.Fatalf("after %d parked round trips: %d parks measured, cost %v", done, client.readWait.nParked, client.readWait.park)
	}
	before := client.readWait.nParked
	for range 2 * measureEvery {
		roundTrip()
	}
	done += 2 * measureEvery
	if got := client.readWait.nParked - before; got > 3 {
		t.Fatalf("%d parks measured in %d parked round trips, want at most 3 (one wait in %d measures)", got, 2*measureEvery, measureEvery)
	}
	for ; done < rounds; done++ {
		roundTrip()
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// Every reply came only once the client had spun and then parked.
	if st := client.Stats(); st.Spins < rounds || st.Parks < rounds {
		t.Fatalf("%d round trips that each spun and parked: Stats.Spins %d, Stats.Parks %d", rounds, st.Spins, st.Parks)
	}
}

// The Read after the one that returned the start of a reply spins as long
// as a reply wait would (the rest of a reply longer than the first
// transfer comes as a second RDMA write), without counting as one; the
// Read after that is an ordinary wait again.
func TestRestWindow(t *testing.T) {
	c := &Conn{set: testSettings(nil)}
	var w waitEstimate
	if got := w.restWindow(&c.set); got != c.set.BusyPoll {
		t.Fatalf("no history: rest window %v, want BusyPoll's %v", got, c.set.BusyPoll)
	}
	for range 64 {
		w.observe(60*time.Microsecond, window(c, &w), w.limit(&c.set))
	}
	if got := w.restWindow(&c.set); got != 2*w.avg {
		t.Fatalf("waits of 60µs: rest window %v, want twice the average, %v", got, 2*w.avg)
	}
	for range parkSamples {
		w.observePark(700 * time.Microsecond)
	}
	before := w
	if got := w.restWindow(&c.set); got != 700*time.Microsecond {
		t.Fatalf("parks of 700µs: rest window %v, want 700µs", got)
	}
	if w != before {
		t.Fatalf("restWindow changed the estimate: %+v, was %+v", w, before)
	}
	for range 64 {
		w.observe(5*time.Millisecond, window(c, &w), w.limit(&c.set))
	}
	if got := w.restWindow(&c.set); got != c.set.BusyPoll {
		t.Fatalf("spinning off: rest window %v, want BusyPoll's %v", got, c.set.BusyPoll)
	}
	off := &Conn{set: testSettings(func(s *Settings) { s.BusyPoll = 0 })}
	if got := before.restWindow(&off.set); got != 0 {
		t.Fatalf("BusyPoll off: rest window %v, want 0", got)
	}

	client, server := simPipe(t, nil)
	defer client.Close()
	defer server.Close()
	if _, err := client.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	req := make([]byte, 7)
	if _, err := io.ReadFull(server, req); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Write([]byte("the start and the rest")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9)
	if _, err := io.ReadFull(client, buf); err != nil {
		t.Fatal(err)
	}
	if !client.replyRest {
		t.Fatal("after the start of a reply: the next Read does not wait for its rest")
	}
	if _, err := io.ReadFull(client, buf[:5]); err != nil {
		t.Fatal(err)
	}
	if client.replyRest {
		t.Fatal("after the rest of a reply: the next Read still waits for a rest")
	}

	// A reply that came in one transfer short of any size where senders
	// cut writes is all here: the Read after it does not wait for a rest,
	// though a Write came before it.
	if _, err := io.ReadFull(client, buf[:8]); err != nil { // the rest of the reply above
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server, req); err != nil {
		t.Fatal(err)
	}
	reply := []byte("a short reply, in one transfer")
	if _, err := server.Write(reply); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(client, make([]byte, len(reply))); err != nil {
		t.Fatal(err)
	}
	var r readAttempt
	client.mu.Lock()
	n, err := client.readLocked(buf, &r)
	client.mu.Unlock()
	if n != 0 || err != nil {
		t.Fatalf("Read after the whole reply: %d, %v; want nothing to read", n, err)
	}
	if !client.replyRest || r.rest {
		t.Fatalf("after a whole %d-byte reply: replyRest %v, rest wait %v; want a Read that does not wait for a rest", len(reply), client.replyRest, r.rest)
	}
}

// A streaming Read (not waiting for a reply) stops spinning while fewer
// than streamHitsMin of its spins catch their data, probes every
// probeEvery-th wait, and spins again once a probe catches its data; a
// reader whose spins catch their data one time in three keeps spinning.
func TestStreamSpinRule(t *testing.T) {
	const d = 10 * time.Microsecond
	var s streamSpin
	for i := range streamSpinWarmup {
		if got := s.window(d); got != d {
			t.Fatalf("wait %d of the warm-up: window %v, want BusyPoll %v", i, got, d)
		}
		s.observe(false)
	}
	spins := 0
	for i := 1; i <= 2*probeEvery; i++ {
		if w := s.window(d); w > 0 {
			spins++
			if i%probeEvery != 0 {
				t.Fatalf("wait %d after only misses spun %v; only every %dth should", i, w, probeEvery)
			}
			s.observe(false)
		}
	}
	if spins != 2 {
		t.Fatalf("%d probes in %d waits, want 2", spins, 2*probeEvery)
	}
	for s.window(d) == 0 {
	}
	s.observe(true) // a probe caught its data
	if got := s.window(d); got != d {
		t.Fatalf("after a probe caught data: window %v, want BusyPoll %v", got, d)
	}

	var third streamSpin
	for i := range 30 {
		if got := third.window(d); got != d {
			t.Fatalf("wait %d, one spin in three catching: window %v, want BusyPoll %v", i, got, d)
		}
		third.observe(i%3 == 0)
	}

	var off streamSpin
	for range 2 * streamSpinWarmup {
		off.observe(false)
	}
	if got := off.window(-1); got != -1 {
		t.Fatalf("spinning disabled: window %v, want it left alone", got)
	}
}

// Over the simulated fabric: a reader whose data only ever comes after it
// parked stops spinning, apart from the probes.
func TestSimStreamReadStopsSpinning(t *testing.T) {
	client, server, cqp := parkSignallingPipe(t)

	const messages = 4 * probeEvery
	reading := make(chan struct{}, 1)
	errc := make(chan error, 1)
	go func() {
		// Send each message only once its Read waits on the completion
		// channel, after its spin (if any) gave up.
		msg := make([]byte, 64)
		for range messages {
			<-reading
			<-cqp.Waiting
			if _, err := server.Write(msg); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	buf := make([]byte, 64)
	for i := range messages {
		// A wait of the previous Read (woken by our own credit update's
		// completion, say) may have left a signal behind: drop it, so
		// that only this Read's waits release the message.
		select {
		case <-cqp.Waiting:
		default:
		}
		reading <- struct{}{}
		if _, err := io.ReadFull(client, buf); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// The pusher may wait on the channel too and release a message early,
	// into a spin: allow for two such strays (each turns spinning back on
	// for a wait or two). With the rule off, every one of the 64 Reads spins.
	st := client.Stats()
	if want := uint64(streamSpinWarmup + messages/probeEvery + 4); st.Spins > want || st.Parks < messages {
		t.Fatalf("%d messages that each came after a park: %d spins (want at most %d), %d parks", messages, st.Spins, want, st.Parks)
	}
}

// parkSignallingPipe is simPipe whose client signals on the returned
// simqp.QP's Waiting channel each time it waits on its completion channel,
// so that the peer can answer only once the client has parked.
func parkSignallingPipe(t *testing.T) (client, server *Conn, cqp *simqp.QP) {
	t.Helper()
	client, server = simPipe(t, nil)
	t.Cleanup(func() {
		client.Close()
		server.Close()
	})
	cqp = simQPOf(client)
	cqp.Waiting = make(chan struct{}, 1)
	return client, server, cqp
}
