package twohosts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/internal/hostlab"
)

// printDeviceDiag prints, in a guest, what its RDMA device counted (its
// resends, sequence errors, NAKs and failed transmits) and what the kernel
// logged about it, each line prefixed "diag-device": when a connection
// ends where it should not, they tell a fault of the device's from ours.
func printDeviceDiag() {
	for _, cmd := range [][]string{
		{"rdma", "statistic", "show"},
		{"dmesg"},
	} {
		out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		if err != nil {
			fmt.Printf("diag-device %s: %v\n", cmd[0], err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if cmd[0] == "dmesg" {
			lines = kernelRDMALines(lines)
		}
		for _, l := range lines {
			fmt.Printf("diag-device %s: %s\n", cmd[0], l)
		}
	}
	for _, l := range cmCounterLines() {
		fmt.Printf("diag-device cm: %s\n", l)
	}
}

// cmCounterLines reads the connection manager's counts of the messages
// each port sent, sent again and received twice (REQ, REP, RTU and the
// rest), those not zero, a line per port and kind: a handshake message
// lost on the wire waits for its resend, about 4 s later.
func cmCounterLines() []string {
	var out []string
	ports, _ := filepath.Glob("/sys/class/infiniband/*/ports/*/cm_tx_msgs")
	for _, p := range ports {
		port := filepath.Dir(p)
		for _, kind := range []string{"cm_tx_msgs", "cm_tx_retries", "cm_rx_msgs", "cm_rx_duplicates"} {
			files, _ := filepath.Glob(filepath.Join(port, kind, "*"))
			var counts []string
			for _, f := range files {
				b, err := os.ReadFile(f)
				if v := strings.TrimSpace(string(b)); err == nil && v != "0" {
					counts = append(counts, filepath.Base(f)+"="+v)
				}
			}
			if len(counts) > 0 {
				dev := filepath.Base(filepath.Dir(filepath.Dir(port))) + "/" + filepath.Base(port)
				out = append(out, dev+" "+kind+" "+strings.Join(counts, " "))
			}
		}
	}
	return out
}

// printNetDiag prints the host's TCP counters and its NICs' queue drops,
// prefixed "diag-net", after a run where connections failed: a TCP
// resume's handshake can lose to a full listen queue or a dropped SYN.
func printNetDiag() {
	for _, cmd := range [][]string{
		{"nstat", "-az", "TcpActiveOpens", "TcpPassiveOpens", "TcpAttemptFails", "TcpRetransSegs",
			"TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtTCPSynRetrans", "TcpExtTCPTimeouts", "TcpExtTCPReqQFullDrop"},
		{"tc", "-s", "qdisc", "show"},
	} {
		out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		if err != nil {
			fmt.Printf("diag-net %s: %v\n", cmd[0], err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fmt.Printf("diag-net %s: %s\n", cmd[0], l)
		}
	}
}

// kernelRDMALines keeps the last kernel log lines about RDMA devices.
func kernelRDMALines(lines []string) []string {
	var keep []string
	for _, l := range lines {
		if strings.Contains(l, "rxe") || strings.Contains(l, "rdma") || strings.Contains(l, "infiniband") {
			keep = append(keep, l)
		}
	}
	return keep[max(len(keep)-30, 0):]
}

// logDiag logs the diagnostic lines the jobs printed, after a failure.
func logDiag(t *testing.T, jobs ...*hostlab.Job) {
	t.Helper()
	for _, j := range jobs {
		if j == nil {
			continue
		}
		for _, l := range strings.Split(j.Output(), "\n") {
			if strings.HasPrefix(l, "diag") {
				t.Log(l)
			}
		}
	}
}
