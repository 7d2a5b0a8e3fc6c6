package pollgroup

import "errors"

// Wait parks the goroutine until a completion m needs is handed to it (a
// receive, an error, or a send's while m needs those: see NeedSends) or
// Kick is called: in the netpoller on the group's channel if no other member is
// waiting there (m leads), else on m's own wakeup. After Stop it returns
// net.ErrClosed. It has one caller at a time.
func (m *Member) Wait() (parked bool, err error) {
	// A wakeup left from a delivery that a step has already taken would
	// end this wait at once, for nothing: drop it before looking, so that
	// any delivery after the look leaves a new one.
	select {
	case <-m.wake:
	default:
	}
	if done, err := m.ready(); done {
		return false, err
	}
	if hooks := testHooks.Load(); hooks != nil && hooks.Parking != nil {
		hooks.Parking(m)
	}
	g := m.g
	if g.follow(m) {
		return true, m.lead()
	}
	<-m.wake
	if g.promoted(m) {
		return true, m.lead()
	}
	_, err = m.ready()
	return true, err
}

// lead waits on the group's channel until m has news, taking each event
// and handing out what the CQ holds, then passes the lead on.
func (m *Member) lead() error {
	g := m.g
	defer g.handOn(m)
	for {
		parkable := g.armForLeader(m)
		if done, err := m.ready(); done {
			return err
		}
		if m.handedSince() {
			// Another goroutine of this connection took what was
			// handed over: the caller looks at the connection again.
			return nil
		}
		if !parkable {
			continue // the CQ may hold completions no event will announce
		}
		err := g.cq.WaitReady()
		switch {
		case err == nil:
			g.takeEvent(m)
		case errors.Is(err, ErrInterrupted):
			// A kick, a stop or a failure: ready says which, or it
			// was for an earlier leader.
		default:
			g.fail(err)
		}
	}
}
