package pollgroup

// leave destroys m's queue pair with destroyQP (if not nil) and ends its
// membership, freeing its group if m was the last member. The group's
// leave polls its CQ, so it runs without r.mu: joins and leaves on every
// device take it. A closed group takes no one (see Reserve), so a join
// meanwhile passes it by.
func (r *Registry) leave(m *Member, destroyQP func() error) error {
	g := m.g
	err := g.leave(m, destroyQP)
	r.mu.Lock()
	defer r.mu.Unlock()
	if g.Closed() {
		for key, gs := range r.byDevice {
			for i, x := range gs {
				if x == g {
					gs = append(gs[:i], gs[i+1:]...)
					break
				}
			}
			if len(gs) == 0 {
				delete(r.byDevice, key)
			} else {
				r.byDevice[key] = gs
			}
		}
	}
	return err
}

func (r *Registry) sharing() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, gs := range r.byDevice {
		for _, g := range gs {
			if g.srq != nil {
				n++
			}
		}
	}
	return n
}

func (r *Registry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, gs := range r.byDevice {
		n += len(gs)
	}
	return n
}
