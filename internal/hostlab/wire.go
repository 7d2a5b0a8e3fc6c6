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

	mu  sync.Mutex // guards the fields below
	cut bool
	// cutRoCE drops RoCE v2 frames alone (see CutRoCE).
	cutRoCE bool
	delay   time.Duration
	loss    float64
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
		drop := w.cut || w.cutRoCE && isRoCEv2(buf[:n]) || (w.loss > 0 && rand.Float64() < w.loss)
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
		cut := w.cut || w.cutRoCE && isRoCEv2(f.data)
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

// Restore ends a Cut or a CutRoCE.
func (w *Wire) Restore() error { return w.set(func() { w.cut, w.cutRoCE = false, false }) }

// CutRoCE drops the wire's RoCE v2 frames (UDP to port 4791, over IPv4 or
// IPv6) in both directions until Restore, and forwards everything else: RDMA
// over this wire stops while TCP, ARP and neighbour discovery go on, as
// behind a switch whose RDMA traffic class is broken.
func (w *Wire) CutRoCE() error { return w.set(func() { w.cutRoCE = true }) }

// roceV2Port is RoCE v2's UDP destination port (IANA).
const roceV2Port = 4791

// isRoCEv2 reports whether an Ethernet frame (untagged or with one 802.1Q
// tag) carries UDP to roceV2Port over IPv4, or over IPv6 without extension
// headers, which RoCE v2 does not use.
func isRoCEv2(f []byte) bool {
	if len(f) < 14 {
		return false
	}
	etype, off := uint16(f[12])<<8|uint16(f[13]), 14
	if etype == 0x8100 && len(f) >= 18 {
		etype, off = uint16(f[16])<<8|uint16(f[17]), 18
	}
	var udp int
	switch etype {
	case 0x0800: // IPv4
		if len(f) < off+20 || f[off+9] != 17 {
			return false
		}
		udp = off + int(f[off]&0x0f)*4
	case 0x86dd: // IPv6
		if len(f) < off+40 || f[off+6] != 17 {
			return false
		}
		udp = off + 40
	default:
		return false
	}
	return len(f) >= udp+4 && int(f[udp+2])<<8|int(f[udp+3]) == roceV2Port
}

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
