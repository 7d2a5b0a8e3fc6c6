package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/rnet-dev/rnet/internal/hostlab"
)

const usageHead = `usage: scripts/softroce-hosts [FLAGS] [< SESSION]

Boots the two-host lab (docs/lab.md, "Two hosts"): host A (10.80.0.1, fd80::1) and
host B (10.80.0.2, fd80::2), two qemu guests of one CPU each with rxe0 on a virtio
NIC, joined by a wire that a relay on this machine forwards. Then it reads commands
from its input, one per line, until quit or the end of the input: typed, or a
heredoc that runs one fault case. On a machine shared with others, run it under
flock /tmp/rnet-lab.lock.

Commands run in the current directory (shared read-write with both hosts) with
RNET_HOST (a or b) and, per wire i, RNET_HOST_ADDRi, RNET_PEER_ADDRi,
RNET_HOST_ADDR6_i, RNET_PEER_ADDR6_i and RNET_HOST_DEVICEi set.

Flags:
`

const usageTail = `
Example (rnet ping from a to b, with the wire cut for 2 s in the middle):
  go build ./cmd/rnet
  flock /tmp/rnet-lab.lock scripts/softroce-hosts <<'EOF'
  b ./rnet perf -s $RNET_HOST_ADDR0
  expect b listening
  a ./rnet ping $RNET_PEER_ADDR0 -c 80 -i 100ms -warmup 0 -progress 1s
  expect a round trips
  cut 0
  sleep 2s
  counts
  restore 0
  wait a 1m
  EOF

Input that is not a terminal ends at the first command that fails (exit status 1).`

// parseFlags turns the command line into the lab's Config; verbose asks
// for the driver's log on stderr.
func parseFlags(args []string, stderr io.Writer) (cfg hostlab.Config, verbose bool, err error) {
	fs := flag.NewFlagSet("softroce-hosts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	wires := fs.String("wires", "rxe", "one RDMA device kind per wire, comma-separated: rxe or siw (siw needs scripts/softroce/build-siw.sh)")
	mtu := fs.String("mtu", "1500", "the hosts' NIC MTU, one for both or A's,B's, such as 1500,9000 (9000 gives rxe its largest IB MTU, 4096)")
	fs.BoolVar(&cfg.Direct, "direct", false, "join the qemus with no relay in between: no wire faults (cut, delay, loss, counts)")
	fs.IntVar(&cfg.MemMiB, "mem", 2048, "each guest's memory in MiB")
	fs.IntVar(&cfg.CPUs, "cpus", 1, "each guest's CPUs")
	fs.StringVar(&cfg.Append, "append", "", "extra guest kernel arguments, such as \"tsc=reliable clocksource=tsc\"")
	fs.DurationVar(&cfg.BootTimeout, "boot-timeout", 4*time.Minute, "bound on each boot, to both hosts' devices ACTIVE")
	fs.BoolVar(&verbose, "v", false, "print the driver's steps and a failed boot's logs on stderr")
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHead)
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\n%s\n%s\n", commandsHelp, usageTail)
	}
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return cfg, false, fmt.Errorf("unexpected argument %q: commands come on the input", fs.Arg(0))
	}
	cfg.Devices = strings.Split(*wires, ",")
	for _, d := range cfg.Devices {
		if d != "rxe" && d != "siw" {
			return cfg, false, fmt.Errorf("-wires: device kind %q; want rxe or siw", d)
		}
	}
	mtus := strings.Split(*mtu, ",")
	if len(mtus) > 2 {
		return cfg, false, fmt.Errorf("-mtu %q: want one MTU or two (A's,B's)", *mtu)
	}
	for i := range cfg.MTU {
		s := mtus[min(i, len(mtus)-1)]
		n, err := strconv.Atoi(s)
		if err != nil || n < 1280 || n > 9000 {
			return cfg, false, fmt.Errorf("-mtu: %q; want 1280 (IPv6's least) to 9000", s)
		}
		cfg.MTU[i] = n
	}
	if cfg.MemMiB < 256 {
		return cfg, false, fmt.Errorf("-mem %d: want at least 256 (MiB)", cfg.MemMiB)
	}
	if cfg.CPUs < 1 {
		return cfg, false, fmt.Errorf("-cpus %d: want at least 1", cfg.CPUs)
	}
	if cfg.BootTimeout <= 0 {
		return cfg, false, fmt.Errorf("-boot-timeout %v: want a positive duration", cfg.BootTimeout)
	}
	return cfg, verbose, nil
}
