//go:build linux && cgo

package twohosts

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/internal/pollgroup"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/rnet"
)

// The client counts poll groups, which only a device build has.
func init() { roles["fault-client"] = faultClient }

// faultClient is the checked-stream client (see stream_test.go).
func faultClient() int {
	addr, n, expect := os.Getenv("FAULT_ADDR"), envInt("FAULT_CONNS", 100), os.Getenv("FAULT_EXPECT")
	if expect != "survive" && expect != "end" && expect != "resume" {
		fmt.Printf("FAULT_EXPECT is %q; want survive, end or resume\n", expect)
		return 2
	}
	marks := make(chan os.Signal, 1)
	signal.Notify(marks, syscall.SIGUSR1)
	// FAULT_TCP_RESUME lets the connections resume over TCP when no RDMA
	// path is left.
	d := &rnet.Dialer{Config: faultConfig(), Timeout: time.Minute, Logger: faultLogger(),
		TCPFallback: os.Getenv("FAULT_TCP_RESUME") == "1"}

	// One connection first, so that what the process keeps for its life
	// (the device's context, the connection manager's channel) is in the
	// baseline and only what the connections hold is compared.
	// A resume's dialer may go through another device, whose context
	// the connection manager then keeps open too: FAULT_WARMUP lists
	// addresses (comma-separated) dialled as well, through those devices.
	warm := []string{addr}
	if v := os.Getenv("FAULT_WARMUP"); v != "" {
		warm = append(warm, strings.Split(v, ",")...)
	}
	for _, a := range warm {
		w, err := d.Dial("rdma", a)
		if err != nil {
			fmt.Println("warm-up dial failed:", err)
			return 1
		}
		w.Close()
	}
	base := takeResources()
	fmt.Println("baseline", base)

	streams, err := dialAll(d, addr, n)
	if err != nil {
		fmt.Println("dial failed:", err)
		return 1
	}
	shared, resumable, mtuLo, mtuHi := 0, 0, 1<<30, 0
	for _, s := range streams {
		info, err := s.c.Info()
		if err != nil {
			fmt.Println("info failed:", err)
			return 1
		}
		if info.SharedRecvQueue {
			shared++
		}
		if s.c.Config().Resume {
			resumable++
		}
		mtuLo, mtuHi = min(mtuLo, info.PathMTU), max(mtuHi, info.PathMTU)
	}
	fmt.Printf("connected %d groups=%d shared=%d resume=%d pathmtu=%d-%d\n", len(streams), pollgroup.Count(), shared, resumable, mtuLo, mtuHi)

	var readers sync.WaitGroup
	for _, s := range streams {
		readers.Add(1)
		go s.write()
		go func() { defer readers.Done(); s.read() }()
	}
	allRead := make(chan struct{})
	go func() { readers.Wait(); close(allRead) }()

	const tickPeriod = 100 * time.Millisecond
	tick := time.NewTicker(tickPeriod) // progress reports, the survivors' check, and the stall measure
	// stalled is how much later than due this loop's ticks came after the
	// mark, in all: how long the host kept the process from running its
	// timers, which delays a keepalive's as much.
	var stalled time.Duration
	lastTick := time.Now()
	steady, moved := false, false
	// The diagnosis runs on a timer of its own, so that it still comes if
	// this loop waits on a connection that hangs.
	diagAfter := envDuration("FAULT_DIAG_AFTER", time.Minute)
	var diagTimer *time.Timer
	var markAt time.Time
	profileMark := make(chan struct{})
	go profileAfterMark(profileMark)
	var snap []uint64
	// writtenAtMark is what each stream had written at the mark: a
	// resumed stream has moved on once bytes written after the fault came
	// back, which no buffered echo can pass for.
	var writtenAtMark []uint64
	lastReport := time.Now()
wait:
	for {
		select {
		case <-allRead:
			break wait
		case <-marks:
			if markAt.IsZero() {
				close(profileMark)
			}
			markAt = time.Now()
			snap = make([]uint64, len(streams))
			writtenAtMark = make([]uint64, len(streams))
			for i, s := range streams {
				snap[i] = s.checked.Load()
				writtenAtMark[i] = s.written.Load()
				s.mark.Store(markAt.UnixNano())
			}
			if diagTimer == nil {
				diagTimer = time.AfterFunc(diagAfter, func() { diagnose(streams) })
			}
			fmt.Println("marked")
		case <-tick.C:
			now := time.Now()
			if !markAt.IsZero() {
				stalled += max(now.Sub(lastTick)-tickPeriod, 0)
			}
			lastTick = now
		}
		least, total := uint64(1<<63), uint64(0)
		for i, s := range streams {
			c := s.checked.Load()
			total += c
			if snap != nil {
				c -= snap[i]
			}
			least = min(least, c)
		}
		if time.Since(lastReport) >= time.Second {
			fmt.Printf("progress bytes=%d\n", total)
			if expect == "end" && !markAt.IsZero() {
				sampleEnding(streams, markAt)
			}
			lastReport = time.Now()
		}
		if !steady && least >= steadyBytes {
			steady = true
			fmt.Printf("steady bytes=%d\n", total)
		}
		// A survivor or a resumed stream that moved on, or a connection
		// that failed where all should go on, ends the run: every writer
		// finishes its stream.
		if !moved && (expect == "survive" && snap != nil && least >= moveOnBytes ||
			expect == "resume" && writtenAtMark != nil && allPast(streams, writtenAtMark) ||
			expect != "end" && streams[0].failures.Load() > 0) {
			moved = true
			fmt.Printf("moved-on bytes=%d failed=%d\n", total, streams[0].failures.Load())
			for _, s := range streams {
				s.stop.Store(true)
			}
		}
	}
	tick.Stop()
	if diagTimer != nil {
		diagTimer.Stop()
	}

	clean, failed := 0, 0
	var maxSinceMark, maxSinceLast time.Duration
	for _, s := range streams {
		<-s.writeDone
		last := time.Unix(0, s.last.Load())
		sinceMark := time.Duration(0)
		if !markAt.IsZero() {
			sinceMark = s.endAt.Sub(markAt)
		}
		sinceLast := s.endAt.Sub(last)
		maxSinceMark, maxSinceLast = max(maxSinceMark, sinceMark), max(maxSinceLast, sinceLast)
		if s.endErr == nil {
			clean++
		} else {
			failed++
		}
		// The path the stream ended on: the transport, once it had moved.
		transport := "?"
		if info, err := s.c.Info(); err == nil {
			transport = info.Transport
		}
		fmt.Printf("ended %d sincemark=%v sincelast=%v bytes=%d peergone=%t transport=%s err=%v\n", s.id,
			sinceMark.Round(time.Millisecond), sinceLast.Round(time.Millisecond), s.checked.Load(),
			errors.Is(s.endErr, rnet.ErrPeerGone), transport, s.endErr)
	}
	if failed > 0 && os.Getenv("FAULT_TCP_RESUME") == "1" {
		printNetDiag()
	}
	// The diagnoses go before the line the host tests wait for, which
	// ends a failing test's reading of this output.
	unexpected := false
	for _, s := range streams {
		if s.endErr != nil && (expect != "end" || !errors.Is(s.endErr, rnet.ErrPeerGone)) {
			fmt.Printf("diag-conn %d stats=%+v\n", s.id, s.c.Stats())
			unexpected = true
		}
	}
	if unexpected {
		printDeviceDiag()
	}
	fmt.Printf("all-ended clean=%d failed=%d maxsincemark=%v maxsincelast=%v stalled=%v\n", clean, failed,
		maxSinceMark.Round(time.Millisecond), maxSinceLast.Round(time.Millisecond), stalled.Round(time.Millisecond))
	if expect != "end" && !markAt.IsZero() {
		reportOutages(streams, markAt, map[string]string{"resume": "resumed", "survive": "recovered"}[expect])
	}

	for _, s := range streams {
		s.c.Close()
	}
	released := waitReleased(base)
	ok := released == ""
	if ok {
		fmt.Println("released ok", takeResources())
	} else {
		fmt.Println("released leak", released)
	}
	switch {
	case expect != "end" && failed > 0, expect == "end" && clean > 0, !ok:
		fmt.Println("client-done failed")
		return 1
	}
	fmt.Println("client-done ok")
	return 0
}

// allPast says whether every stream has had echoed a byte of a Write that
// began after the mark: past what it had written then and the chunk a
// Write in progress may have sent before it.
func allPast(streams []*stream, writtenAtMark []uint64) bool {
	for i, s := range streams {
		if s.checked.Load() <= writtenAtMark[i]+uint64(s.chunk) {
			return false
		}
	}
	return true
}

// reportOutages prints, for each stream of a resume (a survivor's would
// only lengthen the log), when after the mark its echo moved again after
// its longest wait, and how long that wait was; then the median and the
// largest of each over the streams ("<word> n=N p50=D max=D
// gapp50=D gapmax=D"). The longest wait that ends after a fault is the
// outage: for a resume, the detection of the dead path and the move; for a
// fault survived in place, the fault and the retransmissions after it.
func reportOutages(streams []*stream, markAt time.Time, word string) {
	var at, gaps []time.Duration
	for _, s := range streams {
		end := s.gapEnd.Load()
		if end == 0 {
			fmt.Printf("%s %d no read after the mark\n", word, s.id)
			continue
		}
		a, g := time.Unix(0, end).Sub(markAt), time.Duration(s.gap.Load())
		at, gaps = append(at, a), append(gaps, g)
		if word == "resumed" {
			fmt.Printf("%s %d at=%v gap=%v\n", word, s.id, a.Round(time.Millisecond), g.Round(time.Millisecond))
		}
	}
	if len(at) == 0 {
		fmt.Println(word, "none")
		return
	}
	slices.Sort(at)
	slices.Sort(gaps)
	fmt.Printf("%s n=%d p50=%v max=%v gapp50=%v gapmax=%v\n", word, len(at), at[len(at)/2].Round(time.Millisecond),
		at[len(at)-1].Round(time.Millisecond), gaps[len(gaps)/2].Round(time.Millisecond), gaps[len(gaps)-1].Round(time.Millisecond))
}

// dialAll dials n connections, a few at a time as a pool of clients would.
func dialAll(d *rnet.Dialer, addr string, n int) ([]*stream, error) {
	streams := make([]*stream, n)
	failures := new(atomic.Int64)
	errs := make(chan error, n)
	slots := make(chan struct{}, 8)
	rate, chunk := int64(envInt("FAULT_RATE", 0)), streamChunk
	if rate > 0 {
		chunk = pacedChunk
	}
	for i := range n {
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			c, err := d.Dial("rdma", addr)
			if err != nil {
				errs <- fmt.Errorf("connection %d: %w", i, err)
				return
			}
			streams[i] = &stream{id: i, c: c, chunk: chunk, rate: rate, writeDone: make(chan struct{}), failures: failures}
			streams[i].last.Store(time.Now().UnixNano())
			errs <- nil
		}()
	}
	var err error
	for range n {
		err = errors.Join(err, <-errs)
	}
	if err != nil {
		for _, s := range streams {
			if s != nil {
				s.c.Close()
			}
		}
		return nil, err
	}
	return streams, nil
}

// resources is what the client process holds that its connections add to.
type resources struct {
	fds        int
	goroutines map[string]bool
	qps        int // queue pairs of this process, by `rdma resource show qp`
}

func (r resources) String() string {
	return fmt.Sprintf("fds=%d goroutines=%d qps=%d", r.fds, len(r.goroutines), r.qps)
}

func takeResources() resources {
	r := resources{fds: -1, qps: -1, goroutines: procstat.GoroutineIDs()}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		r.fds = len(ents)
	}
	if out, err := exec.Command("rdma", "resource", "show", "qp").Output(); err == nil {
		r.qps = strings.Count(string(out), fmt.Sprintf(" pid %d ", os.Getpid()))
	}
	return r
}

// waitReleased waits up to 20 s for the process to hold what it held at
// base, and says what it still holds beyond it ("" once it holds nothing
// more): the kernel destroys some objects after the call that releases
// them has returned.
func waitReleased(base resources) string {
	deadline := time.Now().Add(20 * time.Second)
	for {
		now := takeResources()
		fresh := procstat.NewGoroutines(base.goroutines)
		var diff []string
		if now.fds != base.fds {
			diff = append(diff, fmt.Sprintf("fds %d, baseline %d", now.fds, base.fds))
		}
		if now.qps != base.qps {
			diff = append(diff, fmt.Sprintf("qps %d, baseline %d", now.qps, base.qps))
		}
		if len(fresh) > 0 {
			diff = append(diff, fmt.Sprintf("%d goroutines beyond the baseline, the first:\n%s", len(fresh), fresh[0]))
		}
		if len(diff) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(diff, "; ")
		}
		time.Sleep(50 * time.Millisecond) // between readings of a real condition
	}
}

// diagnose prints what the connections that have not ended are doing: the
// first few's counters and every goroutine's stack.
func diagnose(streams []*stream) {
	// The stacks first: a connection's Stats waits for its lock, which a
	// hang may hold.
	for _, st := range procstat.Stacks() {
		for _, l := range strings.Split(st, "\n") {
			fmt.Println("diag-stack", l)
		}
	}
	shown := 0
	for _, s := range streams {
		if s.failures == nil || shown >= 3 {
			break
		}
		select {
		case <-s.writeDone:
			continue
		default:
		}
		st := s.c.Stats()
		fmt.Printf("diag %d written=%d checked=%d stats=%+v\n", s.id, s.written.Load(), s.checked.Load(), st)
		shown++
	}
}

// sampleEnding prints, after the mark of a fault that must end every
// connection, what the first and the last connection dialled (one in each
// poll group when there are two) have sent and had completed so far: a
// keepalive that counts no stall while its peer is gone shows there.
func sampleEnding(streams []*stream, markAt time.Time) {
	for _, s := range []*stream{streams[0], streams[len(streams)-1]} {
		select {
		case <-s.writeDone:
			continue
		default:
		}
		st := s.c.Stats()
		fmt.Printf("diag-ending %d at=%v sent=%d completed=%d errors=%d keepalives=%d credits-sent=%d polls=%d parks=%d\n",
			s.id, time.Since(markAt).Round(time.Millisecond), st.MessagesSent, st.SendCompletions, st.ErrorCompletions,
			st.KeepalivesSent, st.CreditUpdatesSent, st.CQPolls, st.Parks)
	}
}
