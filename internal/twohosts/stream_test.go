package twohosts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/rnet"
)

// The checked-stream workload of the fault tests. The client on host A
// dials many connections to the server on host B, writes each one an
// offset-derived stream and verifies the echo, so a byte lost, duplicated or
// reordered in either direction shows as a mismatch at its offset. Both
// print one machine-readable line per event, which the host tests wait for.
//
// The client's environment:
//
//	FAULT_ADDR       the server's address, host:port
//	FAULT_CONNS      how many connections (besides a warm-up one)
//	FAULT_KEEPALIVE  Config.KeepAlive of every connection
//	FAULT_WARMUP     addresses dialled once before the baseline, besides
//	                 FAULT_ADDR, so that it holds their devices' contexts
//	FAULT_RATE       bytes a second each stream writes, in Writes of
//	                 pacedChunk; unset, as fast as it can
//	FAULT_CONFIG     rnet.Config fields as JSON, over the others (the
//	                 server takes it too)
//	FAULT_TCP_RESUME "1": Dialer.TCPFallback, so that connections resume
//	                 over TCP when no RDMA path is left (the server sets
//	                 FAULT_DUAL=1 to listen over TCP too)
//	FAULT_EXPECT     "survive": on SIGUSR1 (the fault is over), let every
//	                 connection move on, then finish each cleanly and
//	                 check every byte came back;
//	                 "end": on SIGUSR1 (the fault has begun), take the time
//	                 and stream until every connection has failed
//
// Its lines: "baseline ...", "connected N groups=G shared=S pathmtu=M",
// "steady bytes=B", "progress bytes=B", "marked", one "ended I ..." per
// connection (with the transport it ended on), "all-ended clean=C failed=F maxsincemark=D maxsincelast=D
// stalled=D" (how late, in all, its timers ran after the mark),
// "released ok|leak ..." and "client-done ok|failed".
func init() {
	roles["fault-server"] = faultServer
	roles["fault-dial"] = faultDial
}

// streamChunk is the size of each Write; a multiple of 8, the pattern's
// word.
const streamChunk = 16 << 10

// pacedChunk is the size of each Write of a stream paced by FAULT_RATE:
// small enough that a paced stream's echo moves several times a second.
const pacedChunk = 4 << 10

// moveOnBytes is how far every connection must get past the mark before a
// surviving run calls its streams going again.
const moveOnBytes = 64 << 10

// steadyBytes is what every connection must have had echoed before the
// client reports a steady stream and a fault may be injected.
const steadyBytes = 64 << 10

// fillPattern writes stream id's bytes from offset off into b: each 8-byte
// word at an aligned offset o holds o mixed with the stream's salt, so every
// word of every stream is distinct.
func fillPattern(b []byte, id int, off uint64) {
	salt := uint64(id+1) * 0x9e3779b97f4a7c15
	var w [8]byte
	for i := 0; i < len(b); {
		o := off + uint64(i)
		base := o &^ 7
		v := base ^ salt
		for k := range w {
			w[k] = byte(v >> (8 * k))
		}
		n := copy(b[i:], w[o-base:])
		i += n
	}
}

// envDuration reads a duration from the environment, or def.
func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

// faultLogger is the roles' Logger in the resume tests: warnings (a
// refused resume request and why, a failed dial) on stdout, prefixed
// "diag-log"; nil otherwise. FAULT_LOG_INFO=1 adds each resume that
// completed, with how long it took and what it sent again.
func faultLogger() *slog.Logger {
	if os.Getenv("FAULT_RESUME") != "1" {
		return nil
	}
	level := slog.LevelWarn
	if os.Getenv("FAULT_LOG_INFO") == "1" {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(prefixWriter{"diag-log "}, &slog.HandlerOptions{Level: level}))
}

// prefixWriter writes each record to stdout after its prefix.
type prefixWriter struct{ prefix string }

func (w prefixWriter) Write(p []byte) (int, error) {
	_, err := os.Stdout.Write(append([]byte(w.prefix), p...))
	return len(p), err
}

// faultConfig is both roles' Config: from the FAULT_ settings, then any
// field FAULT_CONFIG sets as JSON (Config's own names, such as
// {"send_queue_size":255}), for trying another setting in a fault case.
func faultConfig() *rnet.Config {
	cfg := &rnet.Config{KeepAlive: envDuration("FAULT_KEEPALIVE", 2*time.Second),
		Resume: os.Getenv("FAULT_RESUME") == "1", ResumeTimeout: envDuration("FAULT_RESUME_TIMEOUT", 0),
		AckTimeout: envDuration("FAULT_ACK_TIMEOUT", 0)}
	if v := os.Getenv("FAULT_CONFIG"); v != "" {
		if err := json.Unmarshal([]byte(v), cfg); err != nil {
			fmt.Println("FAULT_CONFIG:", err)
			os.Exit(2)
		}
	}
	return cfg
}

// faultServer echoes every connection on $RNET_HOST_ADDR0:$FAULT_PORT (or
// $FAULT_LISTEN_HOST, such as 0.0.0.0, instead of the address) and prints
// each one's end; after FAULT_SERVER_CONNS ends (if set) it exits, once it
// has said whether it still holds queue pairs ("server-released").
// From a SIGUSR1 on it measures how long its host kept it from running.
func faultServer() int {
	stall := newStallMeter()
	go dumpStacksAfterMark(stall)
	go profileAfterMark(stall.marked)
	host := os.Getenv("FAULT_LISTEN_HOST")
	if host == "" {
		host = os.Getenv("RNET_HOST_ADDR0")
	}
	addr := net.JoinHostPort(host, strconv.Itoa(envInt("FAULT_PORT", 7471)))
	lc := rnet.ListenConfig{Config: faultConfig(), Logger: faultLogger()}
	var ln net.Listener
	var err error
	if os.Getenv("FAULT_DUAL") == "1" {
		// Over TCP too, where connections resume when no RDMA path is left.
		ln, err = lc.ListenDual(context.Background(), "rdma", addr)
	} else {
		ln, err = lc.Listen(context.Background(), "rdma", addr)
	}
	if err != nil {
		fmt.Println("listen failed:", err)
		return 1
	}
	fmt.Println("listening", ln.Addr())
	want := envInt("FAULT_SERVER_CONNS", 0)
	var clean, failed atomic.Int64
	var endMu sync.Mutex
	var lastEnd time.Time // guarded by endMu
	ended := make(chan struct{}, 1<<16)
	var closing sync.WaitGroup
	go func() {
		for id := 0; ; id++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			closing.Add(1)
			go func() {
				defer closing.Done()
				rc, ok := c.(*rnet.Conn)
				if !ok {
					// A dual listener's TCP client: in these tests only a
					// resume taken for a new connection.
					fmt.Printf("server-tcp-conn %v: a TCP connection reached Accept\n", c.RemoteAddr())
					failed.Add(1)
					c.Close()
					ended <- struct{}{}
					return
				}
				mtu := 0
				if info, err := rc.Info(); err == nil {
					mtu = info.PathMTU
				}
				n, last, err := echo(c)
				endMu.Lock()
				lastEnd = time.Now()
				endMu.Unlock()
				if err == nil {
					clean.Add(1)
				} else {
					failed.Add(1)
				}
				// The end is when the echo saw it; Close's teardown
				// comes after and is not part of it.
				st := rc.Stats()
				fmt.Printf("server-ended %d bytes=%d sincelast=%v sincemark=%v afterleap=%v keepalives=%d sendcompletions=%d pathmtu=%d peergone=%t err=%v\n",
					id, n, time.Since(last).Round(time.Millisecond), stall.sinceMark().Round(time.Millisecond),
					stall.afterLeap().Round(time.Millisecond), st.KeepalivesSent, st.SendCompletions,
					mtu, errors.Is(err, rnet.ErrPeerGone), err)
				ended <- struct{}{}
				c.Close()
			}()
		}
	}()
	for i := 0; want == 0 || i < want; i++ {
		<-ended
	}
	ln.Close()
	endMu.Lock()
	sinceLeap, leap := stall.sinceLeap(lastEnd)
	endMu.Unlock()
	// sinceleap is, by this host's own clock, how long after the last tick
	// before a freeze the last connection ended, which a test that knows
	// how long the freeze was can turn into the time after the thaw.
	fmt.Printf("server-done clean=%d failed=%d stalled=%v sinceleap=%v leap=%v\n", clean.Load(), failed.Load(),
		stall.total().Round(time.Millisecond), sinceLeap.Round(time.Millisecond), leap.Round(time.Millisecond))
	// After the line the host tests time: the commands take seconds on a
	// busy guest.
	if failed.Load() > 0 {
		printDeviceDiag()
		if os.Getenv("FAULT_DUAL") == "1" {
			printNetDiag()
		}
	} else if os.Getenv("FAULT_RESUME") == "1" {
		// The dialer's resumes may have failed where this side saw clean
		// ends: whether this side's handshake messages were resent tells.
		for _, l := range cmCounterLines() {
			fmt.Printf("diag-device cm: %s\n", l)
		}
	}
	closing.Wait()
	fmt.Println("server-released", waitNoQPs())
	return 0
}

// echo writes back what it reads until io.EOF, then closes its write side;
// it returns the bytes echoed, when it last read some and the error that
// ended it, nil for a clean end.
func echo(c net.Conn) (int64, time.Time, error) {
	buf := make([]byte, 32<<10)
	var total int64
	last := time.Now()
	for {
		n, err := c.Read(buf)
		if n > 0 {
			last = time.Now()
			if _, werr := c.Write(buf[:n]); werr != nil {
				return total, last, werr
			}
			total += int64(n)
		}
		if err == io.EOF {
			return total, last, c.(interface{ CloseWrite() error }).CloseWrite()
		}
		if err != nil {
			return total, last, err
		}
	}
}

// faultDial dials FAULT_ADDR once, within FAULT_DIAL_TIMEOUT, and prints
// the outcome: "dial-ok" with the checked echo of one chunk, or
// "dial-failed elapsed=D timeout=T err=E".
func faultDial() int {
	d := rnet.Dialer{Config: faultConfig(), Timeout: envDuration("FAULT_DIAL_TIMEOUT", time.Minute)}
	start := time.Now()
	c, err := d.Dial("rdma", os.Getenv("FAULT_ADDR"))
	if err != nil {
		var ne net.Error
		timeout := errors.As(err, &ne) && ne.Timeout()
		fmt.Printf("dial-failed elapsed=%v timeout=%t err=%v\n", time.Since(start).Round(time.Millisecond), timeout, err)
		return 0
	}
	defer c.Close()
	out := make([]byte, streamChunk)
	fillPattern(out, 0, 0)
	in := make([]byte, len(out))
	if _, err := c.Write(out); err != nil {
		fmt.Println("dial-ok but write failed:", err)
		return 1
	}
	if _, err := io.ReadFull(c, in); err != nil || !bytes.Equal(in, out) {
		fmt.Println("dial-ok but the echo failed:", err)
		return 1
	}
	fmt.Printf("dial-ok elapsed=%v\n", time.Since(start).Round(time.Millisecond))
	return 0
}

// stream is one connection of the client.
type stream struct {
	id      int
	c       *rnet.Conn
	chunk   int           // bytes a Write
	rate    int64         // bytes a second the writer keeps to, 0 for as fast as it can
	written atomic.Uint64 // bytes written; final once writeDone is closed
	checked atomic.Uint64 // bytes echoed and found right
	last    atomic.Int64  // when bytes last came back, unix ns

	writeDone chan struct{}
	stop      atomic.Bool // the writer stops after its current chunk

	failures *atomic.Int64 // the client's connections that failed so far

	// The resume's measure, kept by read: mark is when the fault began
	// (unix ns, 0 before it); gap is the longest wait between two reads
	// that returned bytes, ending after the mark, and gapEnd when it ended.
	mark   atomic.Int64
	gap    atomic.Int64
	gapEnd atomic.Int64

	endOnce sync.Once
	endAt   time.Time
	endErr  error // nil for a clean end
}

// fail records how the connection ended (err nil for a clean end) and
// when, the first time it is called.
func (s *stream) fail(err error) {
	s.endOnce.Do(func() {
		s.endAt, s.endErr = time.Now(), err
		if err != nil {
			s.failures.Add(1)
		}
	})
}

func (s *stream) write() {
	defer close(s.writeDone)
	buf := make([]byte, s.chunk)
	start := time.Now()
	for !s.stop.Load() {
		off := s.written.Load()
		if s.rate > 0 {
			// The pace itself, not a synchronisation.
			time.Sleep(time.Until(start.Add(time.Duration(off) * time.Second / time.Duration(s.rate))))
		}
		fillPattern(buf, s.id, off)
		if _, err := s.c.Write(buf); err != nil {
			s.fail(fmt.Errorf("write at %d: %w", off, err))
			return
		}
		s.written.Add(uint64(len(buf)))
	}
	if err := s.c.CloseWrite(); err != nil {
		s.fail(fmt.Errorf("close write: %w", err))
	}
}

// read verifies the echo until io.EOF or an error; at io.EOF the echo must
// be exactly what was written.
func (s *stream) read() {
	buf := make([]byte, 32<<10)
	want := make([]byte, len(buf))
	lastRead := time.Now()
	for {
		n, err := s.c.Read(buf)
		if n > 0 {
			now := time.Now()
			if mark := s.mark.Load(); mark != 0 && now.UnixNano() > mark {
				if gap := now.Sub(lastRead); int64(gap) > s.gap.Load() {
					s.gap.Store(int64(gap))
					s.gapEnd.Store(now.UnixNano())
				}
			}
			lastRead = now
			off := s.checked.Load()
			fillPattern(want[:n], s.id, off)
			if !bytes.Equal(buf[:n], want[:n]) {
				i := 0
				for buf[i] == want[i] {
					i++
				}
				s.fail(fmt.Errorf("echo differs at offset %d: got %#x, want %#x", off+uint64(i), buf[i], want[i]))
				return
			}
			s.checked.Add(uint64(n))
			s.last.Store(time.Now().UnixNano())
		}
		if err == io.EOF {
			<-s.writeDone
			if got, sent := s.checked.Load(), s.written.Load(); got != sent {
				s.fail(fmt.Errorf("io.EOF after %d bytes echoed of %d written", got, sent))
			} else {
				s.fail(nil)
			}
			return
		}
		if err != nil {
			s.fail(fmt.Errorf("read at %d: %w", s.checked.Load(), err))
			return
		}
	}
}

// stallMeter measures, from the first SIGUSR1 on, how much later than due a
// 100 ms ticker's ticks come: how long the host kept the process from
// running its timers (a thawed host resending to a peer that is gone, for
// one), which delays its keepalives as much. Before the mark it keeps the
// longest gap between ticks, which a freeze of the host makes: the host's
// clock runs on while its qemu is stopped. Each tick is timed when it is
// received, not when it was due: a ticker drops the ticks it missed, so the
// first one after a freeze is due after the thaw and shows no gap.
type stallMeter struct {
	stalled atomic.Int64
	mark    atomic.Pointer[time.Time] // the first SIGUSR1
	marked  chan struct{}             // closed once mark is set
	// leap is the longest gap before the mark: the last tick received
	// before it and the first after it.
	leap atomic.Pointer[[2]time.Time]
}

func newStallMeter() *stallMeter {
	m := &stallMeter{marked: make(chan struct{})}
	marks := make(chan os.Signal, 1)
	signal.Notify(marks, syscall.SIGUSR1)
	go func() {
		const period = 100 * time.Millisecond
		tick := time.NewTicker(period)
		last := time.Now()
		var longest time.Duration
		// observe accounts the time since the last tick (or mark) as
		// received at now.
		observe := func(now time.Time) {
			late := max(now.Sub(last)-period, 0)
			if m.mark.Load() != nil {
				m.stalled.Add(int64(late))
			} else if late > longest {
				longest = late
				m.leap.Store(&[2]time.Time{last, now})
			}
			last = now
		}
		for {
			select {
			case <-marks:
				if m.mark.Load() == nil {
					// A mark that comes before the first tick after a
					// freeze still finds the freeze's gap.
					mark := time.Now()
					observe(mark)
					m.mark.Store(&mark)
					close(m.marked)
				}
			case <-tick.C:
				observe(time.Now())
			}
		}
	}()
	return m
}

// sinceLeap is how long after the last tick received before the longest
// gap before the mark (a freeze, which began after that tick) t came, and
// how long that gap was; 0, 0 if there was none.
func (m *stallMeter) sinceLeap(t time.Time) (since, gap time.Duration) {
	if l := m.leap.Load(); l != nil {
		return t.Sub(l[0]), l[1].Sub(l[0])
	}
	return 0, 0
}

func (m *stallMeter) total() time.Duration { return time.Duration(m.stalled.Load()) }

// afterLeap is, by this host's clock, the time since its process ran again
// after the longest gap before the mark (a freeze), or 0 if there was none.
func (m *stallMeter) afterLeap() time.Duration {
	if l := m.leap.Load(); l != nil {
		return time.Since(l[1])
	}
	return 0
}

// sinceMark is the time since the first SIGUSR1, or 0 before it.
func (m *stallMeter) sinceMark() time.Duration {
	if mark := m.mark.Load(); mark != nil {
		return time.Since(*mark)
	}
	return 0
}
