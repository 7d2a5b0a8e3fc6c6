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
//
// Not covered: librdmacm does not read a list with no device in it, so the
// last device of a machine is still held until exit; reading the list
// opens a context of every device listed, which librdmacm then keeps, so
// a device that no id of this process uses when it is removed (nothing
// hears of it) is held until exit too.

// A watch looks at the device list after removalPoll, then at intervals
// that double up to removalPollMax, for removalWatchLimit in all: the
// kernel stops listing the device once every id on it is gone, at once
// for a connection that resumes, and when the application closes it for
// one that does not. A device still listed after that is held until
// another removal is heard of on it, or the process exits.
const (
	removalPoll       = 100 * time.Millisecond
	removalPollMax    = 5 * time.Second
	removalWatchLimit = 10 * time.Minute
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
		deadline := time.Now().Add(removalWatchLimit)
		for pause := removalPoll; time.Now().Before(deadline); pause = min(2*pause, removalPollMax) {
			time.Sleep(pause) // the kernel signals nothing when it unlists a device
			if listed, err := verbs.DeviceListed(dev); err == nil && !listed {
				cm.ResyncDevices()
				return
			}
		}
	}()
}
