package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/examples/internal/extest"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

func TestMain(m *testing.M) {
	extest.MainIfChild(main)
	os.Exit(m.Run())
}

// TestGRPCExample runs this program as a server and as a client, over rnet
// and with -tcp, and over rnet with -tls, the way a user would.
func TestGRPCExample(t *testing.T) {
	pair := rdmatest.Require(t)
	for _, tc := range []struct {
		name, net, tls string
		flags          []string
	}{
		{"rdma", "rdma", "off", nil},
		{"tcp", "tcp", "off", []string{"-tcp"}},
		{"rdma-tls", "rdma", "on", []string{"-tls", "-cert"}}, // the certificate file follows
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags := tc.flags
			if tc.tls == "on" {
				flags = append(flags, filepath.Join(t.TempDir(), "cert.pem"))
			}
			addr, wait := extest.Server(t, append(flags, "-s", "-once", "-addr", net.JoinHostPort(pair.Server.String(), "0"))...)
			out := extest.Client(t, append(flags, "-c", "-addr", addr, "-from", pair.Client.String(), "-size", "1000", "-n", "100", "-stream-mib", "2")...)
			r := extest.Result(t, out)
			if r["net"] != tc.net || r["tls"] != tc.tls || r["count"] != "100" || r["download_MBps"] == "" || r["upload_MBps"] == "" {
				t.Errorf("RESULT line %v does not describe the run", r)
			}
			if !strings.Contains(out, "download: 32 messages") || !strings.Contains(out, "upload:   32 messages") {
				t.Errorf("streaming calls missing from the output:\n%s", out)
			}
			wait() // the server exits 0 once the client's connection closes
		})
	}
}
