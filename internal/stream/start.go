package stream

import (
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Start drives an established engine over qp, and hands the connection out.
func Start(qp QueuePair, eng *ring.Engine, set Settings) *Conn {
	layout := eng.Layout()
	c := &Conn{
		qp:         qp,
		laddr:      qp.LocalAddr(),
		raddr:      qp.RemoteAddr(),
		set:        set,
		eng:        eng,
		sends:      make([]wr.Send, 0, layout.SendDepth),
		recvs:      make([]wr.Recv, 0, layout.RecvDepth),
		wcs:        make([]wr.Completion, CompletionBatch),
		readable:   make(chan struct{}, 1),
		writable:   make(chan struct{}, 1),
		changed:    make(chan struct{}, 1),
		waitFree:   make(chan struct{}, 1),
		pushWake:   make(chan struct{}, 1),
		pusherDone: make(chan struct{}),
		closed:     make(chan struct{}),
	}
	c.kickTo.Store(&qp)
	c.readDL, c.writeDL = NewDeadline(c.kick), NewDeadline(c.kick)
	c.keepAlive, c.linger, c.keepAlivePeriod = set.KeepAlive, set.Linger, DefaultKeepAlive
	if set.KeepAlive > 0 {
		c.keepAlivePeriod = set.KeepAlive
	}
	if s, ok := qp.(SoftwarePoster); ok {
		c.softPosts = s.PostsInSoftware()
	}
	c.mu.Lock()
	c.driveLocked()
	c.mu.Unlock()
	if set.Observer != nil {
		set.Observer.Opened(c)
	}
	qp.Start(pathEvents{c: c})
	go c.pusher()
	// Under c.mu: the timer's callback reads the field under c.mu, and
	// nothing else orders it after this write.
	c.mu.Lock()
	c.keepaliveQuietSince = keepaliveNow()
	c.keepalive = time.AfterFunc(c.tickPeriod(), c.tick)
	c.mu.Unlock()
	return c
}
