//go:build linux && cgo

// Command gofloor measures what the Go runtime alone adds to a busy-polling
// ping-pong, with no RDMA and no rnet in it, against a C twin doing the same
// work: two processes bounce a counter through a shared page, and each side
// spends -work µs in one cgo call before it answers, as an rxe post spends
// tens of µs in the posting thread. Run in the Soft-RoCE guest (make
// bench-floor), it gives the floor under rnet's 64 B latency ratio against
// rstream: a Go poller cannot be closer to C than this on the same CPUs.
//
//	gofloor -c path/to/gofloor-c -runs 3 -n 5000 -work 20
//
// Variants: "c" (the C twin), "go" (pure Go loads), and "go-cgo" (each look
// is a cgo call polling up to 16 times, with one runtime.Gosched per wait,
// as an rnet Read that waits for a reply does). -variants adds "go-cspin",
// which spends the whole wait in one C call (up to 1 ms per call) after one
// runtime.Gosched, and "go-cspin-noyield", the same without the yield: do
// fewer, longer crossings take the runtime out of the wait? In the lab the
// first is no better than go-cgo and the second far worse (see
// docs/performance.md).
package main

/*
#include <stdint.h>
#include <time.h>

// gofloor_work spins for us microseconds: the stand-in for a post system call.
static void gofloor_work(int us) {
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < us * 1000L);
}

// gofloor_look polls *p for want up to tries times: one crossing, as rnet's
// spin round polls the CQ up to 16 times in one.
static int gofloor_look(volatile uint64_t *p, uint64_t want, int tries) {
	for (int i = 0; i < tries; i++) {
		if (__atomic_load_n(p, __ATOMIC_ACQUIRE) == want) return 1;
	}
	return 0;
}
// gofloor_spin polls *p for want until it comes or about limit_us
// microseconds pass: a whole wait in one crossing. The clock is read every
// 64 loads.
static int gofloor_spin(volatile uint64_t *p, uint64_t want, int limit_us) {
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		for (int i = 0; i < 64; i++) {
			if (__atomic_load_n(p, __ATOMIC_ACQUIRE) == want) return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) >= limit_us * 1000L) return 0;
	}
}
*/
import "C"

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rnet-dev/rnet/internal/stats"
)

// result is one run of one variant, as the pinger prints it (one JSON line).
type result struct {
	Variant  string  `json:"variant"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	MeanUs   float64 `json:"mean_us"`
	MaxUs    float64 `json:"max_us"`
	Switches int64   `json:"switches"` // the pinger's context switches, voluntary and not
}

func main() {
	role := flag.String("role", "", "internal: run one side, ping or pong")
	shm := flag.String("shm", "", "internal: the shared page's file")
	variant := flag.String("variant", "go", "internal: this side's Go variant (see -variants)")
	cTwin := flag.String("c", "", "the C twin's binary (benchmarks/gofloor/c/floor.c); empty skips it")
	runs := flag.Int("runs", 3, "rounds over the variants; the table shows medians")
	n := flag.Int("n", 5000, "round trips per run, after 100 of warmup")
	work := flag.Int("work", 20, "µs each side works before it answers")
	jsonOut := flag.Bool("json", false, "print each run's result as JSON, not the table")
	goVariants := flag.String("variants", "go,go-cgo", "the Go variants to compare with C, comma-separated: go, go-cgo, go-cspin, go-cspin-noyield")
	flag.Parse()
	if *role != "" {
		res, err := side(*role, *shm, *variant, *n, *work)
		if err == nil && *role == "ping" {
			err = json.NewEncoder(os.Stdout).Encode(res)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gofloor:", err)
			os.Exit(1)
		}
		return
	}
	variants := strings.Split(*goVariants, ",")
	for _, v := range variants {
		if !knownVariant(v) {
			fmt.Fprintf(os.Stderr, "gofloor: unknown variant %q in -variants\n", v)
			os.Exit(2)
		}
	}
	if err := compare(*cTwin, variants, *runs, *n, *work, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "gofloor:", err)
		os.Exit(1)
	}
}

// compare runs each variant runs times, interleaved so that the guest's
// slow and fast minutes fall on all of them, and prints medians and ratios
// to the C twin.
func compare(cTwin string, goVariants []string, runs, n, work int, jsonOut bool) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	variants := goVariants
	if cTwin != "" {
		variants = append([]string{"c"}, goVariants...)
	}
	all := map[string][]result{}
	for r := 1; r <= runs; r++ {
		for _, v := range variants {
			bin, args := self, []string{"-variant", v, "-n", strconv.Itoa(n), "-work", strconv.Itoa(work)}
			if v == "c" {
				bin, args = cTwin, []string{"-n", strconv.Itoa(n), "-work", strconv.Itoa(work)}
			}
			res, err := runPair(bin, args)
			if err != nil {
				return fmt.Errorf("run %d, %s: %w", r, v, err)
			}
			res.Variant = v
			all[v] = append(all[v], res)
			if jsonOut {
				b, _ := json.Marshal(res)
				fmt.Println(string(b))
			} else {
				fmt.Fprintf(os.Stderr, "run %d/%d %-16s p50 %7.1f µs  mean %7.1f µs\n", r, runs, v, res.P50us, res.MeanUs)
			}
		}
	}
	if jsonOut {
		return nil
	}
	fmt.Printf("%d runs of %d round trips, %d µs of work per side; medians over runs\n", runs, n, work)
	fmt.Printf("%-16s %9s %9s %9s %9s %9s %10s\n", "variant", "p50 µs", "p99 µs", "mean µs", "max µs", "switches", "mean / c")
	for _, v := range variants {
		rs := all[v]
		ratio := "-"
		if c := all["c"]; len(c) > 0 {
			ratio = fmt.Sprintf("%.2f×", median(rs, meanOf)/median(c, meanOf))
		}
		fmt.Printf("%-16s %9.1f %9.1f %9.1f %9.0f %9.0f %10s\n", v,
			median(rs, func(x result) float64 { return x.P50us }),
			median(rs, func(x result) float64 { return x.P99us }),
			median(rs, meanOf),
			median(rs, func(x result) float64 { return x.MaxUs }),
			median(rs, func(x result) float64 { return float64(x.Switches) }), ratio)
	}
	return nil
}

func meanOf(x result) float64 { return x.MeanUs }

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return stats.Median(v)
}

// runPair starts the ponger, then the pinger, on a fresh shared page, and
// returns the pinger's result with its context switches.
func runPair(bin string, args []string) (result, error) {
	dir, err := os.MkdirTemp("", "gofloor")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	shm := filepath.Join(dir, "page")
	if err := os.WriteFile(shm, make([]byte, 4096), 0o600); err != nil {
		return result{}, err
	}
	args = append(args, "-shm", shm)
	pong := exec.Command(bin, append([]string{"-role", "pong"}, args...)...)
	pong.Stderr = os.Stderr
	if err := pong.Start(); err != nil {
		return result{}, err
	}
	ping := exec.Command(bin, append([]string{"-role", "ping"}, args...)...)
	ping.Stderr = os.Stderr
	out, err := ping.Output()
	perr := pong.Wait()
	if err != nil {
		return result{}, fmt.Errorf("pinger: %w", err)
	}
	if perr != nil {
		return result{}, fmt.Errorf("ponger: %w", perr)
	}
	var res result
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &res); err != nil {
		return result{}, fmt.Errorf("pinger printed %q: %w", out, err)
	}
	if ru, ok := ping.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.Switches = ru.Nvcsw + ru.Nivcsw
	}
	return res, nil
}

// side plays one end: ping stores the sequence number and waits for it to
// come back; pong waits for it and stores it back. Both work before storing.
// The pinger returns its round trips' summary.
func side(role, shm, variant string, n, work int) (result, error) {
	if role != "ping" && role != "pong" {
		return result{}, fmt.Errorf("unknown role %q", role)
	}
	if !knownVariant(variant) {
		return result{}, fmt.Errorf("unknown variant %q", variant)
	}
	f, err := os.OpenFile(shm, os.O_RDWR, 0)
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	mem, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return result{}, fmt.Errorf("mmap %s: %w", shm, err)
	}
	defer syscall.Munmap(mem)
	// Two cache lines apart, so the sides do not share one.
	pingWord := (*uint64)(unsafe.Pointer(&mem[0]))
	pongWord := (*uint64)(unsafe.Pointer(&mem[64]))
	wait := func(p *uint64, want uint64) {
		if variant == "go" {
			for atomic.LoadUint64(p) != want {
			}
			return
		}
		if variant == "go-cspin" || variant == "go-cspin-noyield" {
			if variant == "go-cspin" {
				runtime.Gosched()
			}
			for C.gofloor_spin((*C.uint64_t)(unsafe.Pointer(p)), C.uint64_t(want), 1000) == 0 {
			}
			return
		}
		runtime.Gosched()
		for C.gofloor_look((*C.uint64_t)(unsafe.Pointer(p)), C.uint64_t(want), 16) == 0 {
		}
	}
	const warmup = 100
	lat := make([]time.Duration, 0, n)
	for i := 1; i <= n+warmup; i++ {
		seq := uint64(i)
		if role == "pong" {
			wait(pingWord, seq)
			C.gofloor_work(C.int(work))
			atomic.StoreUint64(pongWord, seq)
			continue
		}
		start := time.Now()
		C.gofloor_work(C.int(work))
		atomic.StoreUint64(pingWord, seq)
		wait(pongWord, seq)
		if i > warmup {
			lat = append(lat, time.Since(start))
		}
	}
	return summarize(lat), nil
}

func knownVariant(v string) bool {
	return v == "go" || v == "go-cgo" || v == "go-cspin" || v == "go-cspin-noyield"
}

func summarize(lat []time.Duration) result {
	if len(lat) == 0 {
		return result{}
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	// Nearest-rank percentiles, as rnet ping and the benchmarks report them.
	return result{
		P50us:  us(stats.Percentile(lat, 50)),
		P99us:  us(stats.Percentile(lat, 99)),
		MeanUs: us(sum / time.Duration(len(lat))),
		MaxUs:  us(lat[len(lat)-1]),
	}
}
