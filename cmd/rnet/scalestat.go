package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/rnet-dev/rnet/internal/procstat"
)

// memInfo is the part of /proc/meminfo that moves when connections open:
// what they take from the machine as a whole (MemAvailable, which counts the
// pinned rings too), and the kernel's own allocations for their queues and
// bookkeeping (slab, vmalloc, page tables). All in bytes.
type memInfo struct {
	MemAvailable int64 `json:"mem_available"`
	Slab         int64 `json:"slab"`
	VmallocUsed  int64 `json:"vmalloc_used"`
	PageTables   int64 `json:"page_tables"`
}

// parseMeminfo reads /proc/meminfo's "Name:   123 kB" lines.
func parseMeminfo(r io.Reader) (memInfo, error) {
	var m memInfo
	fields := map[string]*int64{
		"MemAvailable": &m.MemAvailable, "Slab": &m.Slab,
		"VmallocUsed": &m.VmallocUsed, "PageTables": &m.PageTables,
	}
	found := 0
	s := bufio.NewScanner(r)
	for s.Scan() {
		name, rest, ok := strings.Cut(s.Text(), ":")
		dst := fields[name]
		if !ok || dst == nil {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("/proc/meminfo: unexpected line %q", s.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("/proc/meminfo: %q: %v", s.Text(), err)
		}
		*dst = kb << 10
		found++
	}
	if err := s.Err(); err != nil {
		return m, err
	}
	if found != len(fields) {
		return m, fmt.Errorf("/proc/meminfo: found %d of the fields MemAvailable, Slab, VmallocUsed, PageTables", found)
	}
	return m, nil
}

func readMeminfo() (memInfo, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return memInfo{}, err
	}
	defer f.Close()
	return parseMeminfo(f)
}

// procStatus is what /proc/self/status says about the process's size.
type procStatus struct {
	Threads  int   `json:"threads"`
	RSSBytes int64 `json:"rss_bytes"`
	// PinnedBytes is VmPin: the pages the kernel pinned for this process's
	// memory registrations, counted as RLIMIT_MEMLOCK counts them.
	PinnedBytes int64 `json:"pinned_bytes"`
}

func parseStatus(r io.Reader) (procStatus, error) {
	var st procStatus
	kbFields := map[string]*int64{"VmRSS": &st.RSSBytes, "VmPin": &st.PinnedBytes}
	found := 0
	s := bufio.NewScanner(r)
	for s.Scan() {
		name, rest, _ := strings.Cut(s.Text(), ":")
		f := strings.Fields(rest)
		if name == "Threads" && len(f) == 1 {
			n, err := strconv.Atoi(f[0])
			if err != nil {
				return st, fmt.Errorf("/proc/self/status: %q: %v", s.Text(), err)
			}
			st.Threads = n
			found++
		} else if dst := kbFields[name]; dst != nil && len(f) == 2 && f[1] == "kB" {
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return st, fmt.Errorf("/proc/self/status: %q: %v", s.Text(), err)
			}
			*dst = kb << 10
			found++
		}
	}
	if err := s.Err(); err != nil {
		return st, err
	}
	if found != 3 {
		return st, fmt.Errorf("/proc/self/status: want the Threads, VmRSS and VmPin lines")
	}
	return st, nil
}

func readStatus() (procStatus, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return procStatus{}, err
	}
	defer f.Close()
	return parseStatus(f)
}

func openFDs() (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	return len(ents), err
}

// rdmaResource is one object of `rdma -j resource show mr|cq`. Its pid is
// the id of the thread that created it (a Go program creates them from any
// of its threads); kernel-owned objects have none (0 here).
type rdmaResource struct {
	Pid   int   `json:"pid"`
	MRLen int64 `json:"mrlen"`
}

// parseRDMAResources counts all objects and this process's objects (those
// created by one of its threads, tids) in `rdma -j resource show KIND`
// output, and sums this process's mrlen (0 for kinds other than mr).
func parseRDMAResources(out []byte, tids map[int]bool) (all, mine int, mrBytes int64, err error) {
	var objs []rdmaResource
	if err := json.Unmarshal(bytes.TrimSpace(out), &objs); err != nil {
		return 0, 0, 0, fmt.Errorf("rdma resource show: not the JSON list expected: %v", err)
	}
	for _, o := range objs {
		if o.Pid != 0 && tids[o.Pid] {
			mine++
			mrBytes += o.MRLen
		}
	}
	return len(objs), mine, mrBytes, nil
}

func runRDMA(args ...string) ([]byte, error) {
	out, err := exec.Command("rdma", args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%v: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return nil, fmt.Errorf("rdma %s (iproute2's rdma tool): %w", strings.Join(args, " "), err)
	}
	return out, nil
}

// rdmaResources counts this process's objects of one kind (as `rdma
// resource show` names it: mr, cq) and sums their registered bytes. The
// kernel's per-object dump of thousands of objects comes in many netlink
// messages and has been seen to miss some, so a dump counts only when it
// holds as many objects of the kind as the per-device summary, read before
// and after it, says there are; it retries a few times.
func rdmaResources(kind string) (mine int, mrBytes int64, err error) {
	total := func() (int, error) {
		out, err := runRDMA("resource", "show")
		if err != nil {
			return 0, err
		}
		res, err := procstat.ParseResources(string(out))
		return res[kind], err
	}
	var all, want int
	for range 5 {
		before, err := total()
		if err != nil {
			return 0, 0, err
		}
		out, err := runRDMA("-j", "resource", "show", kind)
		if err != nil {
			return 0, 0, err
		}
		after, err := total()
		if err != nil {
			return 0, 0, err
		}
		tids, err := threadIDs()
		if err != nil {
			return 0, 0, err
		}
		if all, mine, mrBytes, err = parseRDMAResources(out, tids); err != nil {
			return 0, 0, err
		}
		if want = after; before == after && all == after {
			return mine, mrBytes, nil
		}
	}
	return mine, mrBytes, fmt.Errorf("rdma -j resource show %s listed %d objects where rdma resource show counts %d, five times: the count of this process's is a lower bound", kind, all, want)
}

// threadIDs lists this process's threads (/proc/self/task). The runtime
// keeps its threads for the life of the process, so the creator of every
// RDMA object the process holds is among them.
func threadIDs() (map[int]bool, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	tids := make(map[int]bool, len(ents))
	for _, e := range ents {
		if id, err := strconv.Atoi(e.Name()); err == nil {
			tids[id] = true
		}
	}
	return tids, nil
}

// bootID names this boot of the machine, so that the server can tell
// whether the client runs on the same machine (both ends' kernel memory then
// shows in one /proc/meminfo).
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ScaleResult is what `rnet scale -c` measures, and its --json form.
type ScaleResult struct {
	Transport          string  `json:"transport"`
	Conns              int     `json:"conns"` // asked for
	OK                 int     `json:"ok"`    // opened and echoed correctly
	PinnedBytesPerConn float64 `json:"pinned_bytes_per_conn"`
	FDsPerConn         float64 `json:"fds_per_conn"`
	Threads            int     `json:"threads"`
	CQs                int     `json:"cqs"`
	OpenSecs           float64 `json:"open_secs"`
	BusyConns          int     `json:"busy_conns"`
	BusyBytes          int64   `json:"busy_bytes_per_conn"`
	BusyMBps           float64 `json:"busy_mb_per_s"` // 10^6 bytes per second, all busy connections together
	CloseSecs          float64 `json:"close_secs"`
	// Ends is how many connection ends the server's machine holds: twice
	// the connections when the client runs on the same machine.
	Ends int `json:"ends"`
	// Per connection end, from the server machine's /proc/meminfo before
	// and after opening: everything the machine gave up (MemAvailable:
	// rings, queues, both processes' heaps), and the kernel's slab, vmalloc
	// and page tables.
	MemPerEnd        float64 `json:"mem_per_end"`
	SlabPerEnd       float64 `json:"slab_per_end"`
	VmallocPerEnd    float64 `json:"vmalloc_per_end"`
	PageTablesPerEnd float64 `json:"page_tables_per_end"`
	// ServerRSSPerConn is the server process's resident memory per
	// connection (its rings are resident too, being pinned).
	ServerRSSPerConn float64       `json:"server_rss_per_conn"`
	Server           serverFigures `json:"server"`
}

// serverFigures is what the server measures of itself with its connections
// held idle.
type serverFigures struct {
	Conns int `json:"conns"` // connections it held, echoed
	// MRBytes sums the lengths of its memory regions (Status.PinnedBytes
	// is what the kernel pinned for them, and what PinnedBytesPerConn uses).
	MRBytes   int64      `json:"mr_bytes"`
	MRs       int        `json:"mrs"`
	CQs       int        `json:"cqs"`
	FDs       int        `json:"fds"`
	Status    procStatus `json:"status"`
	Ends      int        `json:"ends"`
	MemBefore memInfo    `json:"mem_before"`
	MemAfter  memInfo    `json:"mem_after"`
	// HandshakeErrors counts connection requests the listener refused or
	// dropped.
	HandshakeErrors int `json:"handshake_errors"`
	// RDMAError says why the RDMA objects could not be counted (no rdma
	// tool, or a TCP run).
	RDMAError string `json:"rdma_error,omitempty"`
}

// fill derives the per-connection figures from the server's.
func (r *ScaleResult) fill(f serverFigures) {
	r.Server = f
	r.Threads, r.CQs, r.Ends = f.Status.Threads, f.CQs, f.Ends
	if f.Conns > 0 {
		r.PinnedBytesPerConn = float64(f.Status.PinnedBytes) / float64(f.Conns)
		r.FDsPerConn = float64(f.FDs) / float64(f.Conns)
		r.ServerRSSPerConn = float64(f.Status.RSSBytes) / float64(f.Conns)
	}
	if f.Ends > 0 {
		per := func(before, after int64) float64 { return float64(after-before) / float64(f.Ends) }
		r.MemPerEnd = per(f.MemAfter.MemAvailable, f.MemBefore.MemAvailable) // available shrinks
		r.SlabPerEnd = per(f.MemBefore.Slab, f.MemAfter.Slab)
		r.VmallocPerEnd = per(f.MemBefore.VmallocUsed, f.MemAfter.VmallocUsed)
		r.PageTablesPerEnd = per(f.MemBefore.PageTables, f.MemAfter.PageTables)
	}
}

// scaleLine is the one-line summary issue 28 asks for.
func (r ScaleResult) scaleLine() string {
	return fmt.Sprintf("SCALE conns=%d ok=%d pinned_bytes_per_conn=%.0f fds_per_conn=%.2f threads=%d cqs=%d open_secs=%.1f busy_MBps=%.1f",
		r.Conns, r.OK, r.PinnedBytesPerConn, r.FDsPerConn, r.Threads, r.CQs, r.OpenSecs, r.BusyMBps)
}

// memLine is the memory a connection end costs its machine.
func (r ScaleResult) memLine() string {
	return fmt.Sprintf("SCALE-MEM ends=%d mem_per_end=%.0f slab_per_end=%.0f vmalloc_per_end=%.0f page_tables_per_end=%.0f server_rss_per_conn=%.0f close_secs=%.1f",
		r.Ends, r.MemPerEnd, r.SlabPerEnd, r.VmallocPerEnd, r.PageTablesPerEnd, r.ServerRSSPerConn, r.CloseSecs)
}
