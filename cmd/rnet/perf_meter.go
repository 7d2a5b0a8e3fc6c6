package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rnet-dev/rnet/internal/bytesize"
	"github.com/rnet-dev/rnet/internal/perfjson"
)

// meter records what the streams of a test move in each interval and, for
// the progress lines, prints it: on a terminal it rewrites one line (the
// sum), elsewhere it prints lines per interval (each stream's and the sum
// with -P).
type meter struct {
	streams []*perfStream
	start   time.Time
	last    []int64 // each stream's bytes at the end of the last interval
	lastT   time.Time
	reverse bool
	print   bool
	tty     bool
	w       io.Writer
	records []perfjson.Interval
	stopc   chan struct{}
	done    chan struct{}
}

func startMeter(streams []*perfStream, start time.Time, every time.Duration, reverse, print bool, w io.Writer) *meter {
	m := &meter{
		streams: streams, start: start, last: make([]int64, len(streams)), lastT: start,
		reverse: reverse, print: print, tty: print && isTerminal(w), w: w,
		stopc: make(chan struct{}), done: make(chan struct{}),
	}
	go m.run(every)
	return m
}

func (m *meter) run(every time.Duration) {
	defer close(m.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stopc:
			return
		case now := <-t.C:
			m.record(now)
		}
	}
}

// stop ends the meter, records the last (shorter) interval and returns
// every interval's record.
func (m *meter) stop() []perfjson.Interval {
	close(m.stopc)
	<-m.done
	if m.tty {
		fmt.Fprint(m.w, "\r\033[K")
	}
	end := m.start
	for _, s := range m.streams {
		if s.end.After(end) {
			end = s.end
		}
	}
	if end.After(m.lastT) || len(m.records) == 0 {
		m.print = false // the summary follows
		m.record(later(end, m.lastT))
	}
	return m.records
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (m *meter) record(now time.Time) {
	// Intervals follow each other even when a tick's time comes before the
	// last interval's end (a late tick, or a clock read on another CPU).
	now = later(now, m.lastT)
	secs := now.Sub(m.lastT).Seconds()
	iv := perfjson.Interval{Start: m.lastT.Sub(m.start).Seconds(), End: now.Sub(m.start).Seconds()}
	for i, s := range m.streams {
		n := s.moved.Load()
		d := n - m.last[i]
		iv.Bytes += d
		if len(m.streams) > 1 {
			iv.Streams = append(iv.Streams, perfjson.StreamInterval{Stream: i + 1, Bytes: d, MBps: mbps(d, secs)})
		}
		m.last[i] = n
	}
	iv.MBps = mbps(iv.Bytes, secs)
	m.records = append(m.records, iv)
	m.lastT = now
	if m.print {
		m.printInterval(iv)
	}
}

func (m *meter) printInterval(iv perfjson.Interval) {
	var total int64
	for _, n := range m.last {
		total += n
	}
	verb := "sent"
	if m.reverse {
		verb = "received"
	}
	sum := fmt.Sprintf("[%6.1fs] %10s %s  %8.1f MB/s now  %8.1f MB/s average", iv.End, bytesize.Format(uint64(total)), verb, iv.MBps, mbps(total, iv.End))
	if m.tty {
		fmt.Fprint(m.w, "\r\033[K"+sum)
		return
	}
	var b strings.Builder
	for _, s := range iv.Streams {
		fmt.Fprintf(&b, "[%6.1fs] [%3d] %10s %s  %8.1f MB/s now\n", iv.End, s.Stream, bytesize.Format(uint64(m.last[s.Stream-1])), verb, s.MBps)
	}
	if len(iv.Streams) > 0 {
		sum = strings.Replace(sum, "] ", "] [SUM] ", 1)
	}
	b.WriteString(sum + "\n")
	io.WriteString(m.w, b.String())
}

func mbps(bytes int64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(bytes) / seconds / 1e6
}
