package ring_test

import (
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
)

// conn runs one side the way the rnet driver is meant to: one mutex
// around the engine and its queue pair, a poller goroutine parked on the
// endpoint's Notify channel, and application goroutines waiting on a
// condition variable for Readable/Writable.
type conn struct {
	mu   sync.Mutex
	cond *sync.Cond
	s    *side
	err  error
}

func newConn(s *side) *conn {
	c := &conn{s: s}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// pumpLocked runs the driver loop until nothing moves; c.mu is held.
func (c *conn) pumpLocked() {
	for {
		moved, err := c.s.service(len(c.s.wcs))
		if err != nil && c.err == nil {
			c.err = err
		}
		if !moved || c.err != nil {
			break
		}
	}
	c.cond.Broadcast()
}

func (c *conn) poller(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-c.s.ep.Notify():
		}
		c.mu.Lock()
		c.pumpLocked()
		c.mu.Unlock()
	}
}

func (c *conn) write(p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(p) > 0 {
		if c.err != nil {
			return c.err
		}
		n, err := c.s.eng.Write(p)
		if err != nil {
			return err
		}
		p = p[n:]
		c.pumpLocked()
		for c.err == nil && !c.s.eng.Writable() {
			c.cond.Wait()
		}
	}
	return nil
}

func (c *conn) read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.err != nil {
			return 0, c.err
		}
		n, err := c.s.eng.Read(p)
		if n > 0 || err != nil {
			c.pumpLocked() // reading may have earned the peer credits
			return n, err
		}
		c.cond.Wait()
	}
}

func (c *conn) closeWrite() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.eng.CloseWrite()
	c.pumpLocked()
}

func TestConcurrentDrivers(t *testing.T) {
	for _, iwarp := range []bool{false, true} {
		t.Run(map[bool]string{false: "roce", true: "iwarp"}[iwarp], func(t *testing.T) {
			cfg := ring.Config{SendBufferSize: 16 << 10, RecvBufferSize: 8 << 10, SendQueueSize: 32, RecvQueueSize: 16, IWARP: iwarp}
			// Bytes land as they are posted, so -race also catches a read of
			// the ring before its completion. Not on iWARP: there rsocket
			// reads SGL updates that may still be in flight.
			f := simfabric.New(3, simfabric.Options{Auto: true, DirectLanding: !iwarp})
			sa, sb := connect(t, f, cfg, cfg)
			conns := [2]*conn{newConn(sa), newConn(sb)}
			stop := make(chan struct{})
			var pollers sync.WaitGroup
			for _, c := range conns {
				pollers.Add(1)
				go func() { defer pollers.Done(); c.poller(stop) }()
			}
			const total = 2 << 20
			var wg sync.WaitGroup
			for i, c := range conns {
				salt := uint64(i) << 40
				wg.Add(2)
				go func() { // writer
					defer wg.Done()
					st := &stream{salt: salt, wbuf: make([]byte, 7000)}
					for st.written < total {
						n := min(len(st.wbuf), int(total-st.written))
						if err := c.write(st.fill(n)); err != nil {
							t.Error(err)
							return
						}
						st.written += uint64(n)
					}
					c.closeWrite()
				}()
				peer := conns[1-i]
				go func() { // reader of the other side's stream
					defer wg.Done()
					st := &stream{salt: salt, total: total, rbuf: make([]byte, 5000)}
					for {
						n, err := peer.read(st.rbuf)
						if errors.Is(err, io.EOF) {
							if st.read != total {
								t.Errorf("EOF after %d bytes", st.read)
							}
							return
						}
						if err != nil {
							t.Error(err)
							return
						}
						if err := st.verify(st.rbuf[:n]); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(stop)
			pollers.Wait()
			if st := f.Stats(); st.RNR != 0 || st.Errors != 0 {
				t.Fatalf("fabric %+v", st)
			}
		})
	}
}
