package rnet

import (
	"expvar"
	"sync"
)

// expvarName is the expvar variable the process's Metrics are published
// as, in /debug/vars.
const expvarName = "rnet"

var publishOnce sync.Once

// publishExpvar publishes ReadMetrics as the expvar variable "rnet", and
// ReadSockets(1000) as "rnet_sockets", once, when the process first opens
// a connection or a listener: they are read only when the variables are.
// Another copy of this package in the binary (a vendored one, say) may have
// published the name first; this copy then leaves it, as expvar.Publish
// would panic.
func publishExpvar() {
	publishOnce.Do(func() {
		publishMetrics(expvarName)
		publishSockets(socketsExpvarName, publishedConnLimit)
	})
}

// publishMetrics publishes ReadMetrics as the expvar variable name unless
// that name is taken, and reports whether it did.
func publishMetrics(name string) bool {
	if expvar.Get(name) != nil {
		return false
	}
	expvar.Publish(name, expvar.Func(func() any { return ReadMetrics() }))
	return true
}
