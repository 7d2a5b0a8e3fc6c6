//go:build linux && cgo

package rnet

import (
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// Letting go of a removed device. The kernel finishes removing an rxe or
// siw device only once every process has closed its contexts of it, and
// librdmacm keeps one of every device an id has used until it reads the
// device list again, which nothing else makes it do: a server that saw a
// device go held it until it exited (rdma link delete waited for it).
// Once a connection hears that its device is being removed, a watch waits
// for the kernel to stop listing it, which it does once every id on the
// device is gone, and then has librdmacm read the list (cm.ResyncDevices).
// librdmacm does not read a list with no device in it: the last device of
// a machine is still held until exit.

// removalPoll is how often a watch looks at the device list, and
// removalWatchLimit how long it looks: a device whose removal takes longer
// is held until another connection on it hears of a removal, or the
// process exits.
const (
	removalPoll       = 100 * time.Millisecond
	removalWatchLimit = time.Minute
)

// removalWatches are the devices a watch runs for.
var removalWatches sync.Map // device name → struct{}

// watchRemoval starts the watch for dev, unless one runs.
func watchRemoval(dev string) {
	if dev == "" {
		return
	}
	if _, running := removalWatches.LoadOrStore(dev, struct{}{}); running {
		return
	}
	go func() {
		defer removalWatches.Delete(dev)
		tick := time.NewTicker(removalPoll)
		defer tick.Stop()
		for deadline := time.Now().Add(removalWatchLimit); time.Now().Before(deadline); <-tick.C {
			if listed, err := verbs.DeviceListed(dev); err == nil && !listed {
				cm.ResyncDevices()
				return
			}
		}
	}()
}
