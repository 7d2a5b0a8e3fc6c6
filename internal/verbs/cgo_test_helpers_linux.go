//go:build cgo

package verbs

/*
#include "shim.h"
*/
import "C"

// cWCStatusStr is ibv_wc_status_str, for the test that checks our own table.
func cWCStatusStr(s WCStatus) string {
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(s)))
}
