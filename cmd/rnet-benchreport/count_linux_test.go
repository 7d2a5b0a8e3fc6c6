package main

import (
	"math"
	"os/exec"
	"testing"
)

// TestRunCountedCountsWrites: a process that makes 200 write calls is
// counted with at least those.
func TestRunCountedCountsWrites(t *testing.T) {
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 200 ]; do echo x >/dev/null; i=$((i+1)); done")
	n, err := runCounted(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if math.IsNaN(n) || n < 200 {
		t.Errorf("counted %v read and write calls, want at least 200", n)
	}
}

// TestSNMPTCPSegments: InSegs + OutSegs from /proc/net/snmp's Tcp lines,
// found by name; text without them is an error; this host's file reads.
func TestSNMPTCPSegments(t *testing.T) {
	const snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n" +
		"Tcp: RtoAlgorithm RtoMin InSegs OutSegs RetransSegs\nTcp: 1 200 1000 234 7\n" +
		"Udp: InDatagrams\nUdp: 5\n"
	if n, err := snmpTCPSegments(snmp); err != nil || n != 1234 {
		t.Errorf("snmpTCPSegments = %v, %v; want 1234", n, err)
	}
	for _, bad := range []string{"Ip: Forwarding\nIp: 1\n", "Tcp: RtoAlgorithm InSegs\nTcp: 1 5\n", "Tcp: InSegs OutSegs\nTcp: 1 x\n"} {
		if n, err := snmpTCPSegments(bad); err == nil {
			t.Errorf("snmpTCPSegments(%q) = %v; want an error", bad, n)
		}
	}
	if n := tcpSegments(); math.IsNaN(n) || n < 0 {
		t.Errorf("tcpSegments() = %v on this host", n)
	}
}
