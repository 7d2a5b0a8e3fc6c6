package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/rnet"
)

// TestRXEStatShowsPerfServer runs rnet perf -s -metrics as a process on an
// rxe device and a -P 4 client against it; while the client sends, rnet
// stat (--json, then the tables) shows the server's listener with its
// accepts, each of the four connections on the server's device with the
// client's address, a queue pair number `rdma resource show qp` lists for
// the server and the bytes it read, the open connections by device and
// the pinned bytes.
func TestRXEStatShowsPerfServer(t *testing.T) {
	p := rdmatest.Require(t)
	const streams = 4
	device := deviceWith(t, p.Server)
	srv := startCmd(t, "perf", "-s", p.Server.String()+":0", "-metrics", "127.0.0.1:0")
	var metrics string
	select {
	case line := <-srv.lines:
		_, metrics, _ = strings.Cut(line, "metrics on ")
		if metrics == "" {
			t.Fatalf("rnet perf -s -metrics: line %q after listening, want where the metrics are", line)
		}
	case <-time.After(time.Minute):
		t.Fatal("rnet perf -s -metrics: no line saying where the metrics are")
	}
	// The client sends until the test ends and kills it.
	client := exec.Command(os.Args[0], "perf", "-c", srv.addr, "-from", p.Client.String(),
		"-P", strconv.Itoa(streams), "-t", "10m", "-q")
	client.Env = append(os.Environ(), "RNET_CMD_AS_MAIN=1")
	var clientErr bytes.Buffer
	client.Stderr = &clientErr
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	clientDone := make(chan error, 1)
	go func() { clientDone <- client.Wait() }()
	t.Cleanup(func() {
		client.Process.Kill()
		<-clientDone
	})

	// Poll stat until it shows every stream's connection reading.
	var st published
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, errs, code := rnetCmd(t, "stat", "--json", metrics)
		if code != 0 {
			t.Fatalf("rnet stat --json %s: exit %d: %s", metrics, code, errs)
		}
		st = published{}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("rnet stat --json: %v: %s", err, out)
		}
		if st.Sockets == nil {
			t.Fatalf("rnet stat --json shows no sockets: %s", out)
		}
		if len(reading(st.Sockets.Connections, srv.addr, p.Client)) == streams {
			break
		}
		select {
		case err := <-clientDone:
			clientDone <- err // for the cleanup
			t.Fatalf("the perf client exited (%v: %s) before stat showed its %d streams reading: %s", err, clientErr.String(), streams, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 3 minutes rnet stat never showed %d connections from %v reading: %s", streams, p.Client, out)
		}
		time.Sleep(100 * time.Millisecond) // between readings of a real condition
	}

	conns := reading(st.Sockets.Connections, srv.addr, p.Client)
	serverQPs := procstat.HeldRDMAOf(t, srv.cmd.Process.Pid).QPNumbers
	for _, c := range conns {
		if c.Device != device || c.QPNumber == 0 || !serverQPs[c.QPNumber] || c.SendRingSize+c.RecvRingSize <= 0 {
			t.Errorf("connection %+v; want one on %s with a queue pair number among the server's %v, and rings", c, device, serverQPs)
		}
	}
	if l := listenerAt(st.Sockets.Listeners, srv.addr); l == nil || l.Metrics.Counters.Accepted < streams {
		t.Errorf("listeners %+v; want %s with at least %d accepted", st.Sockets.Listeners, srv.addr, streams)
	}
	g := st.Gauges
	open := int64(0)
	for _, o := range g.Connections {
		if o.Transport == "rdma" && o.Device == device {
			open = o.Count
		}
	}
	if open < streams || g.QueuePairs < streams || g.MemoryRegions <= 0 || g.PinnedBytes <= 0 || st.Counters.Accepts < streams {
		t.Errorf("gauges %+v, counters %+v; want %d connections open on %s, their queue pairs, pinned bytes", g, st.Counters, streams, device)
	}

	// The tables, from host:port alone.
	host := strings.TrimSuffix(strings.TrimPrefix(metrics, "http://"), "/debug/vars")
	out, errs, code := rnetCmd(t, "stat", host)
	if code != 0 {
		t.Fatalf("rnet stat %s: exit %d: %s", host, code, errs)
	}
	t.Logf("rnet stat %s:\n%s", host, out)
	rows := statRows(out)
	if r := rows["Listener"][srv.addr]; len(r) < 2 || atoi(r[1]) < streams {
		t.Errorf("rnet stat: listener row %q; want %s with at least %d accepted", r, srv.addr, streams)
	}
	shown := 0
	for _, c := range conns {
		r := rows["Transport Device Local Peer"][c.Local+" "+c.Remote]
		if len(r) == 8 && r[0] == "rdma" && r[1] == device && r[4] == strconv.FormatUint(uint64(c.QPNumber), 10) && atoi(r[5]) >= int64(c.BytesRead) && atoi(r[7]) > 0 {
			shown++
		} else {
			t.Errorf("rnet stat: connection row %q; want rdma on %s, queue pair %d, at least %d bytes read, rings", r, device, c.QPNumber, c.BytesRead)
		}
	}
	if r := rows["Transport Device Open"]["rdma "+device]; len(r) != 3 || atoi(r[2]) < streams {
		t.Errorf("rnet stat: open connections row %q; want rdma on %s, at least %d", r, device, streams)
	}
	if r := rows["Gauge"]["pinned_bytes"]; len(r) != 2 || atoi(r[1]) <= 0 {
		t.Errorf("rnet stat: pinned_bytes row %q; want bytes", r)
	}
	if shown != streams {
		t.Errorf("rnet stat shows %d of the %d connections as stat --json does", shown, streams)
	}
}

// reading returns the connections to the listener at addr from the
// client's IP that have read something.
func reading(conns []rnet.ConnSocket, addr string, client netip.Addr) []rnet.ConnSocket {
	var list []rnet.ConnSocket
	for _, c := range conns {
		host, _, _ := net.SplitHostPort(c.Remote)
		if c.Transport == "rdma" && c.Local == addr && host == client.String() && c.BytesRead > 0 {
			list = append(list, c)
		}
	}
	return list
}

func listenerAt(ls []rnet.ListenerSocket, addr string) *rnet.ListenerSocket {
	for i := range ls {
		if ls[i].Address == addr {
			return &ls[i]
		}
	}
	return nil
}

// statRows splits rnet stat's tables into rows by table and key: a table
// is named by the columns of its header that make up a row's key (the
// first, or for the connections the first four, whose key is the local
// and peer address), and a row is its fields.
func statRows(out string) map[string]map[string][]string {
	tables := map[string]map[string][]string{}
	for _, block := range strings.Split(strings.TrimSpace(out), "\n\n") {
		lines := strings.Split(block, "\n")
		header := strings.Fields(lines[0])
		name, key := header[0], func(f []string) string { return f[0] }
		switch {
		case len(header) >= 4 && header[2] == "Local":
			name, key = strings.Join(header[:4], " "), func(f []string) string { return f[2] + " " + f[3] }
		case len(header) == 3 && header[2] == "Open":
			name, key = strings.Join(header, " "), func(f []string) string { return f[0] + " " + f[1] }
		}
		rows := map[string][]string{}
		for _, line := range lines[1:] {
			if f := strings.Fields(line); len(f) >= 2 {
				rows[key(f)] = f
			}
		}
		tables[name] = rows
	}
	return tables
}

func atoi(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}
