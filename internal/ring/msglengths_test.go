package ring

import "testing"

// The lengths queue grows as it fills, keeps its order across the wrap,
// and never grows past its limit.
func TestMsgLengthsGrowInOrder(t *testing.T) {
	q := msgLengths{limit: 100}
	next, want := uint32(0), uint32(0)
	for round := range 20 {
		for range 8 {
			q.push(next)
			next++
		}
		for k := range 5 {
			if got := q.pop(1); got != uint64(want) {
				t.Fatalf("round %d pop %d: %d, want %d", round, k, got, want)
			}
			want++
		}
	}
	if len(q.lens) > 100 || q.n != int(next-want) {
		t.Fatalf("%d slots, %d queued, want %d", len(q.lens), q.n, next-want)
	}
	for q.n < 100 {
		q.push(next)
		next++
	}
	q.push(next) // past the limit: dropped
	if len(q.lens) != 100 || q.n != 100 {
		t.Fatalf("%d slots, %d queued", len(q.lens), q.n)
	}
}
