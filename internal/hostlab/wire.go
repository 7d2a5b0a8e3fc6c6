package hostlab

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Wire joins the two hosts' NICs of one index. Its faults apply to both
// directions and need the relay (Config.Direct off).
type Wire struct {
	index  int
	direct bool
	socks  [2]*net.UDPConn // socks[h] faces host h: receives what h sends, sends what h receives
	peers  [2]*net.UDPAddr // each host's qemu end

	queues [2]chan frame // frames per direction, in order, for deliver

	mu    sync.Mutex // guards the fields below
	cut   bool
	delay time.Duration
	loss  float64
	// Counts of frames the relay forwarded and dropped (cut or lost).
	forwarded, dropped uint64
}

type frame struct {
	data []byte
	due  time.Time
}

// newRelay binds the relay's two ends for wire index, whose hosts' qemus use
// the UDP ports qemuPorts.
func newRelay(index int, qemuPorts [2]int) (*Wire, error) {
	w := &Wire{index: index}
	for h := range 2 {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			w.close()
			return nil, fmt.Errorf("hostlab: wire %d relay: %w", index, err)
		}
		c.SetReadBuffer(4 << 20)
		c.SetWriteBuffer(4 << 20)
		w.socks[h] = c
		w.peers[h] = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: qemuPorts[h]}
	}
	for from := range 2 {
		w.queues[from] = make(chan frame, 4096)
		go w.receive(from)
		go w.deliver(from)
	}
	return w, nil
}

// relayPort is the UDP port host h's qemu sends to.
func (w *Wire) relayPort(h int) int { return w.socks[h].LocalAddr().(*net.UDPAddr).Port }

// receive reads what host from sends and queues it for the other host.
func (w *Wire) receive(from int) {
	buf := make([]byte, 65536)
	for {
		n, addr, err := w.socks[from].ReadFromUDP(buf)
		if err != nil {
			close(w.queues[from])
			return
		}
		if addr.Port != w.peers[from].Port {
			continue // not this wire's host
		}
		w.mu.Lock()
		drop := w.cut || (w.loss > 0 && rand.Float64() < w.loss)
		delay := w.delay
		if drop {
			w.dropped++
		}
		w.mu.Unlock()
		if drop {
			continue
		}
		f := frame{data: append([]byte(nil), buf[:n]...)}
		if delay > 0 {
			f.due = time.Now().Add(delay)
		}
		select {
		case w.queues[from] <- f:
		default: // a full queue drops, as a switch's buffer does
			w.mu.Lock()
			w.dropped++
			w.mu.Unlock()
		}
	}
}

// deliver sends host from's frames to the other host, each at its due time.
func (w *Wire) deliver(from int) {
	to := 1 - from
	for f := range w.queues[from] {
		if d := time.Until(f.due); !f.due.IsZero() && d > 0 {
			time.Sleep(d) // the wire's delay itself, not a synchronisation
		}
		w.mu.Lock()
		cut := w.cut
		if !cut {
			w.forwarded++
		} else {
			w.dropped++
		}
		w.mu.Unlock()
		if !cut {
			w.socks[to].WriteToUDP(f.data, w.peers[to])
		}
	}
}

// Cut drops every frame in both directions until Restore, silently: neither
// NIC loses its carrier, as when a cable behind a switch is cut.
func (w *Wire) Cut() error { return w.set(func() { w.cut = true }) }

// Restore ends a Cut.
func (w *Wire) Restore() error { return w.set(func() { w.cut = false }) }

// SetDelay delays every frame by d in each direction (0 for none).
func (w *Wire) SetDelay(d time.Duration) error { return w.set(func() { w.delay = d }) }

// SetLoss drops each frame with probability p, 0 to 1.
func (w *Wire) SetLoss(p float64) error {
	if p < 0 || p > 1 {
		return fmt.Errorf("hostlab: loss %v; want 0 to 1", p)
	}
	return w.set(func() { w.loss = p })
}

// Counts returns how many frames the relay has forwarded and dropped.
func (w *Wire) Counts() (forwarded, dropped uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.forwarded, w.dropped
}

func (w *Wire) set(f func()) error {
	if w.direct {
		return fmt.Errorf("hostlab: wire %d is direct (Config.Direct): no faults", w.index)
	}
	w.mu.Lock()
	f()
	w.mu.Unlock()
	return nil
}

func (w *Wire) close() {
	for _, c := range w.socks {
		if c != nil {
			c.Close()
		}
	}
}
