// Package procstat counts what a test process holds (OS threads, open
// fds, goroutines, netpoller waiters and the kernel's RDMA objects), so that
// tests can check what rnet leaves behind.
package procstat

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// OSThreads is the process's OS thread count from /proc/self/status.
func OSThreads(tb testing.TB) int {
	tb.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("no Threads: line in /proc/self/status")
	return 0
}

// OpenFDs is the number of open file descriptors of the process.
func OpenFDs(tb testing.TB) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	return len(ents)
}

// WaitOpenFDs re-reads OpenFDs until it is want, for up to 10 s, and
// returns the last reading: a listener's background work (a handshake it
// has just taken up) may hold an fd for a moment after the call that
// ended it has returned.
func WaitOpenFDs(tb testing.TB, want int) int {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := OpenFDs(tb)
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond) // between readings of a real condition
	}
}

// WaitParked returns once at least n goroutines are parked in the netpoller
// ("IO wait"). It polls the goroutine dump, yielding in between: a wait for
// a condition, not a sleep.
func WaitParked(tb testing.TB, n int) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c := NetpollWaiters()
		if c >= n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("only %d goroutines parked in the netpoller, want %d", c, n)
		}
		runtime.Gosched()
	}
}

// StartParked runs wait in a new goroutine and returns once one more
// goroutine than before is parked in the netpoller, so that what the caller
// does next finds wait parked, not still on its way there.
func StartParked(tb testing.TB, wait func()) {
	tb.Helper()
	base := NetpollWaiters()
	go wait()
	WaitParked(tb, base+1)
}

// ThreadLimit is the most OS threads a process whose goroutines all park in
// the netpoller should need: the runtime keeps a thread per P and a few of
// its own, so the bound grows with GOMAXPROCS; it is 20 on small machines.
func ThreadLimit() int { return max(20, runtime.GOMAXPROCS(0)+16) }

// NetpollWaiters is the number of goroutines parked in the netpoller.
func NetpollWaiters() int {
	n := 0
	for _, st := range Stacks() {
		if strings.Contains(st, "[IO wait") {
			n++
		}
	}
	return n
}

// Stacks returns the stack of every goroutine, as runtime.Stack prints them.
func Stacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func goroutineID(stack string) (string, bool) {
	id, ok := strings.CutPrefix(stack, "goroutine ")
	id, _, _ = strings.Cut(id, " ")
	return id, ok
}

// GoroutineIDs returns the IDs of the live goroutines. A leak check compares
// identities, not counts: a goroutine of the snapshot that ends meanwhile
// (a helper that handed over its result and is on its way out) must neither
// fail the check nor hide a new one.
func GoroutineIDs() map[string]bool {
	ids := make(map[string]bool)
	for _, st := range Stacks() {
		if id, ok := goroutineID(st); ok {
			ids[id] = true
		}
	}
	return ids
}

// housekeeping names the functions of goroutines that belong to the
// process, not to a connection, and so are no leak: the timer that unmaps
// ring memory kept for reuse runs one whenever it fires.
var housekeeping = []string{"rnet/internal/verbs.trimSpare"}

// NewGoroutines returns the stacks of the goroutines alive now that were
// not in before (from GoroutineIDs), except the caller's own, housekeeping
// and any whose stack contains one of also.
func NewGoroutines(before map[string]bool, also ...string) []string {
	var fresh []string
	for i, st := range Stacks() {
		// runtime.Stack prints the calling goroutine first.
		if id, ok := goroutineID(st); ok && i > 0 && !before[id] && !containsAny(st, housekeeping) && !containsAny(st, also) {
			fresh = append(fresh, st)
		}
	}
	return fresh
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// WaitNoNewGoroutines waits up to 10 s for the goroutines started since
// before to exit, and returns the stacks of those still alive, leaving out
// those NewGoroutines leaves out.
func WaitNoNewGoroutines(before map[string]bool, also ...string) []string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		fresh := NewGoroutines(before, also...)
		if len(fresh) == 0 || time.Now().After(deadline) {
			return fresh
		}
		runtime.Gosched()
	}
}

// ResourceKinds are the kernel objects a connection makes, as `rdma resource
// show` names them.
var ResourceKinds = []string{"qp", "cq", "mr", "pd", "cm_id", "ctx", "srq"}

// WaitResources re-reads Resources until every kind in ResourceKinds counts
// as in want, for up to 10 s, and returns the last reading. The kernel
// frees some objects after the call that releases them returns (rxe
// destroys QPs from a work queue), so one reading can see objects on
// their way out.
func WaitResources(tb testing.TB, want map[string]int) map[string]int {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := Resources(tb)
		same := true
		for _, k := range ResourceKinds {
			same = same && got[k] == want[k]
		}
		if same || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond) // between readings of a real condition
	}
}

// Resources sums the counts `rdma resource show` prints per device, e.g.
//
//	0: rxe0: pd 2 cq 3 qp 3 cm_id 1 mr 1 ctx 1 srq 0
//
// into {"pd": ..., "cq": ..., ...} over all devices.
func Resources(tb testing.TB) map[string]int {
	tb.Helper()
	out, err := exec.Command("rdma", "resource", "show").CombinedOutput()
	if err != nil {
		tb.Fatalf("rdma resource show: %v: %s", err, out)
	}
	res, err := ParseResources(string(out))
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// ParseResources parses `rdma resource show` output.
func ParseResources(out string) (map[string]int, error) {
	res := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") || !strings.HasSuffix(f[1], ":") {
			return nil, fmt.Errorf("rdma resource show: unexpected line %q", line)
		}
		kv := f[2:]
		if len(kv)%2 != 0 {
			return nil, fmt.Errorf("rdma resource show: odd key/value list in %q", line)
		}
		for i := 0; i < len(kv); i += 2 {
			n, err := strconv.Atoi(kv[i+1])
			if err != nil {
				return nil, fmt.Errorf("rdma resource show: %q: %v", line, err)
			}
			res[kv[i]] += n
		}
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("rdma resource show: no devices in %q", out)
	}
	return res, nil
}

// Threads returns the thread IDs of the process pid, as /proc lists them:
// the kernel names the thread that created an RDMA object as its owner.
func Threads(tb testing.TB, pid int) map[int]bool {
	tb.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		tb.Fatal(err)
	}
	tids := map[int]bool{}
	for _, e := range tasks {
		if id, err := strconv.Atoi(e.Name()); err == nil {
			tids[id] = true
		}
	}
	return tids
}

// RDMAHeld is what `rdma resource show` lists for this process: its queue
// pairs (and their numbers), its memory regions and the bytes they pin.
type RDMAHeld struct {
	QPs, MRs    int
	PinnedBytes int64
	QPNumbers   map[uint32]bool
}

// rdmaObject is one object of `rdma -j resource show qp|mr`. Its pid is the
// thread that created it; the kernel's own have none.
type rdmaObject struct {
	Pid   int    `json:"pid"`
	LQPN  uint32 `json:"lqpn"`
	MRLen int64  `json:"mrlen"`
}

// HeldRDMA is what the rdma tool lists for this process now.
func HeldRDMA(tb testing.TB) RDMAHeld {
	tb.Helper()
	return HeldRDMAOf(tb, os.Getpid())
}

// HeldRDMAOf is what the rdma tool lists for the process pid now.
func HeldRDMAOf(tb testing.TB, pid int) RDMAHeld {
	tb.Helper()
	h := RDMAHeld{QPNumbers: map[uint32]bool{}}
	for _, o := range processObjects(tb, pid, "qp") {
		h.QPs++
		h.QPNumbers[o.LQPN] = true
	}
	for _, o := range processObjects(tb, pid, "mr") {
		h.MRs++
		h.PinnedBytes += o.MRLen
	}
	return h
}

// processObjects lists the objects of kind (qp, mr) of the process pid, from a
// dump that holds as many objects as the summary read before and after it
// counts: the kernel's dump of many objects comes in many netlink
// messages and can miss some.
func processObjects(tb testing.TB, pid int, kind string) []rdmaObject {
	tb.Helper()
	for range 5 {
		before := Resources(tb)[kind]
		out, err := exec.Command("rdma", "-j", "resource", "show", kind).Output()
		if err != nil {
			tb.Fatalf("rdma -j resource show %s: %v", kind, err)
		}
		after := Resources(tb)[kind]
		var all []rdmaObject
		if err := json.Unmarshal(bytes.TrimSpace(out), &all); err != nil {
			tb.Fatalf("rdma -j resource show %s: %v: %s", kind, err, out)
		}
		if before != after || len(all) != after {
			continue
		}
		tids := Threads(tb, pid)
		var mine []rdmaObject
		for _, o := range all {
			if o.Pid != 0 && tids[o.Pid] {
				mine = append(mine, o)
			}
		}
		return mine
	}
	tb.Fatalf("rdma -j resource show %s never listed as many objects as rdma resource show counts", kind)
	return nil
}
