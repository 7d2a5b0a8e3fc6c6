package rnet

import (
	"testing"
	"time"
)

func simMaker(cfg *Config) pipeMaker {
	return func(t *testing.T) (*Conn, *Conn) { return simPipe(t, cfg) }
}

func TestSimNettest(t *testing.T) { testNettest(t, simMaker(nil)) }

// Small rings force wrap-around, credit stalls and two-SGE transfers on every
// few writes.
func TestSimNettestSmallRings(t *testing.T) {
	testNettest(t, simMaker(&Config{SendBufferSize: 4096, RecvBufferSize: 4096, SendQueueSize: 16, RecvQueueSize: 16}))
}

func TestSimContract(t *testing.T) { testContract(t, simMaker(nil)) }

// Polling without end (as rstream does) must still honour deadlines, Close
// and the peer's shutdown: the spin is where every blocked call waits.
func TestSimNettestBusyPoll(t *testing.T) {
	testNettest(t, simMaker(&Config{BusyPoll: time.Hour}))
}

func TestSimContractBusyPoll(t *testing.T) {
	testContract(t, simMaker(&Config{BusyPoll: time.Hour}))
}
