//go:build cgo

package verbs

import (
	"reflect"
	"sort"
	"testing"

	"github.com/rnet-dev/rnet/internal/wr"
)

// TestLayoutMatchesC holds every field of internal/wr's types against
// shim.h's C mirror, which the post and poll crossings read them through:
// a field that moves, changes size or is added on one side only fails here.
func TestLayoutMatchesC(t *testing.T) {
	checkLayout(t, cLayout(), wr.Send{}, wr.SGE{}, wr.Recv{}, wr.Completion{})
}

// TestLayoutCheckFailsOnAMovedField shows the check is not vacuous: a C
// layout with one field moved, or one missing, is refused.
func TestLayoutCheckFailsOnAMovedField(t *testing.T) {
	for _, change := range []func(m map[string]uintptr){
		func(m map[string]uintptr) { m["Send.RKey"] += 4 },
		func(m map[string]uintptr) { m["Completion"] += 8 },
		func(m map[string]uintptr) { delete(m, "Recv.NumSGE") },
	} {
		c := cLayout()
		change(c)
		var rec recorder
		checkLayout(&rec, c, wr.Send{}, wr.SGE{}, wr.Recv{}, wr.Completion{})
		if len(rec.errs) == 0 {
			t.Errorf("a changed C layout passed the check")
		}
	}
}

type recorder struct{ errs []string }

func (r *recorder) Errorf(format string, args ...any) { r.errs = append(r.errs, format) }
func (r *recorder) Helper()                           {}

type errorfer interface {
	Errorf(format string, args ...any)
	Helper()
}

func checkLayout(t errorfer, c map[string]uintptr, types ...any) {
	t.Helper()
	seen := map[string]bool{}
	for _, v := range types {
		typ := reflect.TypeOf(v)
		name := typ.Name()
		seen[name] = true
		if got, want := typ.Size(), c[name]; got != want {
			t.Errorf("sizeof %s: Go %d, C %d", name, got, want)
		}
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			key := name + "." + f.Name
			seen[key] = true
			off, ok := c[key]
			if !ok {
				t.Errorf("%s has no C mirror", key)
				continue
			}
			if f.Offset != off {
				t.Errorf("offset of %s: Go %d, C %d", key, f.Offset, off)
			}
		}
	}
	var extra []string
	for k := range c {
		if !seen[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		t.Errorf("C mirror has %s, which the Go types lack", k)
	}
}
