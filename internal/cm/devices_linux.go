//go:build cgo

package cm

/*
#include "shim.h"

static void rnet_resync_devices(void)
{
	struct ibv_context **list = rdma_get_devices(NULL);
	if (list)
		rdma_free_devices(list);
}
*/
import "C"

import "github.com/rnet-dev/rnet/internal/verbs"

// ResyncDevices has librdmacm read the device list again. It keeps a
// context of every device an id has used, and closes that of a device the
// kernel no longer lists only when it next reads the list, or at once if
// no id uses it then; until then a driver that waits for every context of
// a device being removed (rxe, siw) waits for this process.
func ResyncDevices() {
	verbs.CountCgoCall()
	C.rnet_resync_devices()
}
