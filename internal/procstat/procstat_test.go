package procstat

import "testing"

func TestParseResources(t *testing.T) {
	got, err := ParseResources("0: rxe0: pd 2 cq 3 qp 3 cm_id 1 mr 1 ctx 1 srq 0\n1: rxe1: pd 1 cq 0 qp 1 cm_id 0 mr 4 ctx 0 srq 0\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"pd": 3, "cq": 3, "qp": 4, "cm_id": 1, "mr": 5, "ctx": 1, "srq": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	if _, err := ParseResources("garbage here\n"); err == nil {
		t.Error("garbage parsed")
	}
}
