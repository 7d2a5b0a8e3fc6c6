package main

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/examples/internal/extest"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

func TestMain(m *testing.M) {
	extest.MainIfChild(main)
	os.Exit(m.Run())
}

// TestEchoExample runs this program as a server and as a client, over rnet
// and with -tcp, the way a user would.
func TestEchoExample(t *testing.T) {
	pair := rdmatest.Require(t)
	for _, tcp := range []bool{false, true} {
		name, netFlags := "rdma", []string{}
		if tcp {
			name, netFlags = "tcp", []string{"-tcp"}
		}
		t.Run(name, func(t *testing.T) {
			addr, wait := extest.Server(t, append(netFlags, "-s", "-once", "-addr", net.JoinHostPort(pair.Server.String(), "0"))...)
			out := extest.Client(t, append(netFlags, "-c", "-addr", addr, "-from", pair.Client.String(), "-size", "4096", "-n", "200")...)
			r := extest.Result(t, out)
			if r["net"] != name || r["size"] != "4096" || r["count"] != "200" || r["MBps"] == "" || r["p50_us"] == "" {
				t.Errorf("RESULT line %v does not describe the run", r)
			}
			if !strings.Contains(out, "connected "+pair.Client.String()+":") {
				t.Errorf("the client did not connect from %s:\n%s", pair.Client, out)
			}
			srv := wait()
			// 200 round trips and 200 streamed messages of 4096 bytes.
			if !strings.Contains(srv, "echoed 1638400 bytes") {
				t.Errorf("the server did not echo every byte:\n%s", srv)
			}
		})
	}
}
