package rnet

import (
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

// Host benchmarks over the simulated fabric that need package rnet's
// unexported poll-group constructors. The plain Conn ones, against TCP, are
// in benchmarks/ (through package rnettest), whose module may require gRPC.

// BenchmarkSimPollGroup: one poll group of client ends (their servers in
// another) with 1 to 1000 connections, each ping-ponging a 64-byte message
// at once. One op is one round trip on one of them; msgs/s counts the
// messages (two per round trip) all connections carried per second.
//
//	go test -run '^$' -bench 'BenchmarkSimPollGroup' -benchtime 20000x ./rnet
func BenchmarkSimPollGroup(b *testing.B) {
	for _, conns := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			sn := simGroupPipes(b, conns, simGroupOptions{})
			defer sn.closeAll()
			const size = 64
			start := make(chan struct{})
			errs := make(chan error, 2*conns)
			var wg sync.WaitGroup
			for i := range conns {
				rounds := b.N / conns
				if i < b.N%conns {
					rounds++
				}
				c, s := sn.clients[i], sn.servers[i]
				wg.Add(2)
				go func() { // echo
					defer wg.Done()
					buf := make([]byte, size)
					for range rounds {
						if _, err := io.ReadFull(s, buf); err != nil {
							errs <- err
							return
						}
						if _, err := s.Write(buf); err != nil {
							errs <- err
							return
						}
					}
				}()
				go func() {
					defer wg.Done()
					buf := make([]byte, size)
					<-start
					for range rounds {
						if _, err := c.Write(buf); err != nil {
							errs <- err
							return
						}
						if _, err := io.ReadFull(c, buf); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			b.ReportAllocs()
			b.ResetTimer()
			t0 := time.Now()
			close(start)
			wg.Wait()
			elapsed := time.Since(t0)
			b.StopTimer()
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
			b.ReportMetric(float64(2*b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}
