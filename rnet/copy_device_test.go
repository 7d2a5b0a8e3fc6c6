//go:build linux && cgo

package rnet

import (
	"testing"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// io.Copy into and out of Conns on a real device, both ways at once
// (ReadFrom and WriteTo lending the registered rings), checked by checksum;
// every resource is released after.
func TestRXECopyChecksums(t *testing.T) {
	for _, tc := range []struct {
		name string
		pair func(testing.TB) rdmatest.Pair
		cfg  *Config
	}{
		{"RoCE", rdmatest.Require, nil},
		{"RoCESmallRings", rdmatest.Require, &Config{SendBufferSize: 4096, RecvBufferSize: 4096, IdleBufferSize: 1024}},
		{"IWARP", rdmatest.RequireIWARP, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pair := tc.pair(t)
			warmUp(t, pair)
			gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
			c, s, err := devicePipe(pair, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			copyBothWays(t, c, s, 4<<20+321)
			c.Close()
			s.Close()
			checkReleased(t, gor0, fds0, res0)
		})
	}
}
