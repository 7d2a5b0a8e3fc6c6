package verbs

import (
	"fmt"

	"github.com/rnet-dev/rnet/internal/wr"
)

// Work requests and completions are internal/wr's types, handed to C as
// they are: shim.h mirrors their layout, post_linux.go checks the mirror at
// compile time and TestLayoutMatchesC at run time.

// MaxBatch is how many work requests one crossing into C posts (the C side
// builds the chain in stack arrays of this size); longer slices are posted
// in several crossings.
const MaxBatch = 32

// CompletionErr returns nil for a successful completion and a *WCError
// otherwise; qpNum names the QP the completion belongs to.
func CompletionErr(c *wr.Completion, qpNum uint32) error {
	if c.Status == wr.WCSuccess {
		return nil
	}
	return &WCError{Status: c.Status, Opcode: c.Opcode, QPNum: qpNum, VendorErr: c.VendorErr, ID: c.ID}
}

// WCError is a completion that failed.
type WCError struct {
	Status    wr.WCStatus
	Opcode    wr.WCOpcode
	QPNum     uint32
	VendorErr uint32
	ID        uint64
}

func (e *WCError) Error() string {
	// The opcode of a failed completion is not defined by the verbs spec
	// (only wr_id and status are); it is reported as the provider filled it.
	return fmt.Sprintf("work completion failed on QP %#x: %s (%s), opcode %s, vendor error %#x, wr_id %#x",
		e.QPNum, e.Status.Name(), e.Status.Description(), e.Opcode, e.VendorErr, e.ID)
}
