package pollgroup

// The lead: one member at a time waits on the group's channel.

// follow makes m the leader if there is none (and reports true), else a
// follower.
func (g *Group) follow(m *Member) (leads bool) {
	g.lmu.Lock()
	defer g.lmu.Unlock()
	if g.leader == nil {
		g.leader = m
		return true
	}
	g.followers.push(m)
	return false
}

// promoted reports whether m, a follower that woke, now leads; if not, it
// is no longer a follower.
func (g *Group) promoted(m *Member) bool {
	g.lmu.Lock()
	defer g.lmu.Unlock()
	if g.leader == m {
		return true
	}
	g.followers.remove(m)
	return false
}

// handOn ends m's lead: the longest-waiting follower leads next.
func (g *Group) handOn(m *Member) {
	g.lmu.Lock()
	defer g.lmu.Unlock()
	if g.leader != m {
		return
	}
	g.leader = g.followers.pop()
	if g.leader != nil {
		notify(g.leader.wake)
	}
}

// unfollow takes m out of the lead and the followers, as it leaves.
func (g *Group) unfollow(m *Member) {
	g.handOn(m)
	g.lmu.Lock()
	g.followers.remove(m)
	g.lmu.Unlock()
}

// interruptIfLeader wakes m if it leads: it waits on the channel, not on
// its own wakeup.
func (g *Group) interruptIfLeader(m *Member) {
	g.lmu.Lock()
	leads := g.leader == m
	g.lmu.Unlock()
	if leads {
		g.cq.Interrupt()
	}
}

func (l *waitList) push(m *Member) {
	m.prev, m.next, m.listed = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = m
	} else {
		l.head = m
	}
	l.tail = m
}

func (l *waitList) pop() *Member {
	m := l.head
	if m != nil {
		l.remove(m)
	}
	return m
}

func (l *waitList) remove(m *Member) {
	if !m.listed {
		return
	}
	if m.prev != nil {
		m.prev.next = m.next
	} else {
		l.head = m.next
	}
	if m.next != nil {
		m.next.prev = m.prev
	} else {
		l.tail = m.prev
	}
	m.prev, m.next, m.listed = nil, nil, false
}
