// Package hostlab boots the two-host lab: two Soft-RoCE guests, host A and host
// B, each its own kernel with its own RDMA devices, joined by virtual wires;
// it runs commands on either host and does to hosts and wires what a
// data centre does to them: power off, freeze, reboot, cut, delay and loss.
//
// Each guest is booted as scripts/softroce-vm boots its one guest (the
// host's root read-only over 9p, Debian's kernel), with one virtio NIC per
// wire. A wire is qemu's dgram netdev over the host's loopback; by default
// both ends send to a relay in this process, which forwards, delays, drops or
// cuts (silently, as a cable cut behind a switch: neither NIC loses its
// carrier). Config.Direct joins the two qemus without the relay, for
// benchmarks. Host.LinkDown instead takes one host's NIC down, which its
// kernel sees (rxe reports the port down).
//
// On wire i host A has 10.(80+i).0.1 and fd(80+i)::1, host B .2 and ::2, and
// each NIC carries one RDMA device, named after its kind and wire (rxe0,
// rxe1, siw1). A command on a host runs in the current directory (shared
// read-write, as in scripts/softroce-vm) with RNET_HOST (a or b) and, for each
// wire i, RNET_HOST_ADDRi, RNET_PEER_ADDRi, RNET_HOST_ADDR6_i,
// RNET_PEER_ADDR6_i and RNET_HOST_DEVICEi set.
package hostlab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// Config says what to boot. The zero value is two hosts with one rxe wire.
type Config struct {
	// Devices has one RDMA device kind per wire, "rxe" or "siw" (siw needs
	// scripts/softroce/build-siw.sh to have built the module). Default
	// {"rxe"}: one wire. At most 4.
	Devices []string
	// MTU is each host's NIC MTU, A's then B's. Default 1500 on both; 9000
	// gives rxe its largest path MTU, 4096.
	MTU [2]int
	// Direct joins the hosts' NICs with no relay in between: no Wire
	// faults, no relay CPU, for benchmarks.
	Direct bool
	// MemMiB is each guest's memory. Default 2048.
	MemMiB int
	// CPUs is each guest's CPU count. Default 1, so that on a two-core
	// machine each host's kernel, device and processes run on their own
	// core, as two machines' would.
	CPUs int
	// Append is extra guest kernel arguments, such as
	// "tsc=reliable clocksource=tsc" for benchmarks.
	Append string
	// BootTimeout bounds a boot from qemu's start to the host's devices
	// being ACTIVE. Default 4 minutes (two emulated guests booting side by
	// side on a loaded machine).
	BootTimeout time.Duration
	// Dir is the directory shared read-write with both hosts, where their
	// commands start. Default the current directory.
	Dir string
	// Log receives the hosts' console and setup logs when a boot fails, and
	// the driver's steps. Default nowhere.
	Log io.Writer
}

// Lab is two booted hosts and the wires between them.
type Lab struct {
	A, B  *Host
	wires []*Wire
	cfg   Config
	kern  kernel
}

// WireAddr is the address host index (0 for A, 1 for B) has on wire.
func WireAddr(wire, host int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(80 + wire), 0, byte(host + 1)})
}

// WireAddr6 is the IPv6 address host index has on wire.
func WireAddr6(wire, host int) netip.Addr {
	var a [16]byte
	a[0], a[1] = 0xfd, byte(0x80+wire)
	a[15] = byte(host + 1)
	return netip.AddrFrom16(a)
}

// Boot boots both hosts side by side and returns when both have their
// devices ACTIVE, or an error naming the host and the step that failed.
func Boot(ctx context.Context, cfg Config) (*Lab, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	kern, err := prepareKernel(ctx, cfg.Log)
	if err != nil {
		return nil, err
	}
	l := &Lab{cfg: cfg, kern: kern}
	ok := false
	defer func() {
		if !ok {
			l.Close()
		}
	}()
	ports := make([][2]int, len(cfg.Devices)) // each host's qemu UDP port per wire
	for i := range cfg.Devices {
		for h := range 2 {
			if ports[i][h], err = freeUDPPort(); err != nil {
				return nil, fmt.Errorf("hostlab: wire %d: %w", i, err)
			}
		}
		var w *Wire
		if cfg.Direct {
			w = &Wire{index: i, direct: true}
		} else if w, err = newRelay(i, ports[i]); err != nil {
			return nil, err
		}
		l.wires = append(l.wires, w)
	}
	l.A = newHost(l, 0, ports)
	l.B = newHost(l, 1, ports)
	errs := make(chan error, 2)
	bootCtx, cancel := context.WithCancel(ctx) // one host failing stops the other's boot
	defer cancel()
	for _, h := range []*Host{l.A, l.B} {
		go func() {
			err := h.boot(bootCtx)
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	err = errors.Join(<-errs, <-errs)
	if err != nil {
		return nil, err
	}
	ok = true
	return l, nil
}

// Wire returns wire i (0 is the first).
func (l *Lab) Wire(i int) *Wire { return l.wires[i] }

// Wires is how many wires join the hosts.
func (l *Lab) Wires() int { return len(l.wires) }

// Close powers both hosts off and stops the relays. Jobs still running end
// with ErrPoweredOff.
func (l *Lab) Close() error {
	for _, h := range []*Host{l.A, l.B} {
		if h != nil {
			h.PowerOff()
			h.removeFiles()
		}
	}
	for _, w := range l.wires {
		w.close()
	}
	return nil
}

func (c *Config) fill() error {
	if len(c.Devices) == 0 {
		c.Devices = []string{"rxe"}
	}
	if len(c.Devices) > 4 {
		return fmt.Errorf("hostlab: %d wires; at most 4", len(c.Devices))
	}
	for _, d := range c.Devices {
		if d != "rxe" && d != "siw" {
			return fmt.Errorf("hostlab: device kind %q; want rxe or siw", d)
		}
	}
	for i := range c.MTU {
		if c.MTU[i] == 0 {
			c.MTU[i] = 1500
		}
		if c.MTU[i] < 1280 || c.MTU[i] > 9000 {
			return fmt.Errorf("hostlab: MTU %d; want 1280 (IPv6's least) to 9000", c.MTU[i])
		}
	}
	if c.MemMiB == 0 {
		c.MemMiB = 2048
	}
	if c.CPUs == 0 {
		c.CPUs = 1
	}
	if c.BootTimeout == 0 {
		c.BootTimeout = 4 * time.Minute
	}
	if c.Dir == "" {
		d, err := os.Getwd()
		if err != nil {
			return err
		}
		c.Dir = d
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	c.Log = &lockedWriter{w: c.Log} // both hosts boot and log at once
	if runtime.GOOS != "linux" {
		return errors.New("hostlab: the lab runs on Linux hosts only")
	}
	return nil
}

type lockedWriter struct {
	mu sync.Mutex // serialises writes to w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// scriptsDir is scripts/softroce in the repository holding this package.
func scriptsDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if ok {
		d := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "softroce")
		if _, err := os.Stat(filepath.Join(d, "guest-stage2.sh")); err == nil {
			return filepath.Abs(d)
		}
	}
	if d := os.Getenv("RNET_LAB_SCRIPTS"); d != "" {
		return d, nil
	}
	return "", errors.New("hostlab: scripts/softroce not found beside the source; set RNET_LAB_SCRIPTS")
}
