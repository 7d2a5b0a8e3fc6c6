package verbs

import "sync/atomic"

// Resources counts what this process holds on its devices through this
// package, as `rdma resource show` lists it: queue pairs, memory regions
// and the bytes they register, shared receive queues and the receives
// they have room for. Each object is counted from its creation until its
// Close destroys it.
type Resources struct {
	QPs             int64
	MRs             int64
	RegisteredBytes int64 // the whole pages each region registers
	SRQs            int64
	SRQDepth        int64 // the receives the shared receive queues have room for, as granted
}

// held are the Resources' counters, updated where the objects are made
// and destroyed, never on the data path.
var held struct {
	qps, mrs, registeredBytes, srqs, srqDepth atomic.Int64
}

// ReadResources returns what the process holds now.
func ReadResources() Resources {
	return Resources{
		QPs:             held.qps.Load(),
		MRs:             held.mrs.Load(),
		RegisteredBytes: held.registeredBytes.Load(),
		SRQs:            held.srqs.Load(),
		SRQDepth:        held.srqDepth.Load(),
	}
}
