package verbs

import (
	"testing"
	"unsafe"
)

// The layout is an API promise to internal/ring (see wr.go).
func TestLayout(t *testing.T) {
	type off struct {
		name      string
		got, want uintptr
	}
	var s SendWR
	var r RecvWR
	var c Completion
	for _, o := range []off{
		{"sizeof SendWR", unsafe.Sizeof(s), 80},
		{"SendWR.Op", unsafe.Offsetof(s.Op), 8},
		{"SendWR.Imm", unsafe.Offsetof(s.Imm), 12},
		{"SendWR.Inline", unsafe.Offsetof(s.Inline), 16},
		{"SendWR.Signaled", unsafe.Offsetof(s.Signaled), 17},
		{"SendWR.SGE", unsafe.Offsetof(s.SGE), 32},
		{"SendWR.NumSGE", unsafe.Offsetof(s.NumSGE), 24},
		{"SendWR.RemoteAddr", unsafe.Offsetof(s.RemoteAddr), 64},
		{"SendWR.RKey", unsafe.Offsetof(s.RKey), 72},
		{"sizeof SGE", unsafe.Sizeof(SGE{}), 16},
		{"sizeof RecvWR", unsafe.Sizeof(r), 32},
		{"RecvWR.SGE", unsafe.Offsetof(r.SGE), 16},
		{"RecvWR.NumSGE", unsafe.Offsetof(r.NumSGE), 8},
		{"sizeof Completion", unsafe.Sizeof(c), 32},
		{"Completion.Status", unsafe.Offsetof(c.Status), 8},
		{"Completion.Opcode", unsafe.Offsetof(c.Opcode), 12},
		{"Completion.Imm", unsafe.Offsetof(c.Imm), 16},
		{"Completion.ByteLen", unsafe.Offsetof(c.ByteLen), 20},
		{"Completion.VendorErr", unsafe.Offsetof(c.VendorErr), 24},
	} {
		if unsafe.Sizeof(0) == 8 && o.got != o.want {
			t.Errorf("%s = %d, want %d", o.name, o.got, o.want)
		}
	}
}
