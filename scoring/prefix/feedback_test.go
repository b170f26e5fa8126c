package prefix

import (
	"slices"
	"testing"
)

// TestAppendCheckpointsAt: the checkpoints of a chain's continuation,
// recorded after its beginning, leave the index as Record of the
// beginning and then of the whole chain does, wherever the continuation
// begins.
func TestAppendCheckpointsAt(t *testing.T) {
	whole := chainN(3, 0, 70, 70)
	for _, first := range []int{0, 1, 3, 4, 5, 16, 39, 69} {
		want := NewIndex(IndexConfig{Stride: 4})
		want.Record(1, whole[:first])
		want.Record(1, whole)
		got := NewIndex(IndexConfig{Stride: 4})
		got.Record(1, whole[:first])
		got.RecordCheckpoints(1, got.AppendCheckpointsAt(nil, first, whole[first:]))
		for _, n := range []int{1, 4, 17, 40, 69, 70} {
			w, g := make([]int, 2), make([]int, 2)
			want.Lookup(whole[:n], w)
			got.Lookup(whole[:n], g)
			if !slices.Equal(w, g) {
				t.Errorf("continued at %d: Lookup(chain[:%d]) = %v, want %v", first, n, g, w)
			}
		}
	}
	if got := NewIndex(IndexConfig{}).AppendCheckpointsAt(nil, 3, nil); len(got) != 0 {
		t.Errorf("AppendCheckpointsAt(nil, 3, nil) = %v, want none", got)
	}
}

// TestDropOlder: an eviction shown at a stamp drops the replica's entries
// recorded before it, keeps the later ones and the other replicas'.
func TestDropOlder(t *testing.T) {
	x := NewIndex(IndexConfig{Stride: 4})
	old, mid, fresh := chainN(1, 0, 32, 32), chainN(2, 0, 32, 32), chainN(3, 0, 32, 32)
	x.Record(0, old)
	x.Record(1, old)
	x.Record(0, mid)
	at, ok := x.Stamp(0, mid[31])
	if !ok || at != x.Clock() {
		t.Fatalf("Stamp(0, mid's tip) = %d, %v, want %d, true", at, ok, x.Clock())
	}
	x.Record(0, fresh)
	kept := x.DropOlder(0, at)
	if want := 2 * 32 / 4; kept != want || x.Resident(0) != want {
		t.Errorf("DropOlder kept %d (Resident %d), want %d", kept, x.Resident(0), want)
	}
	tests := []struct {
		name  string
		chain []uint64
		want  []int
	}{
		{name: "older dropped", chain: old, want: []int{0, 32 * 16}},
		{name: "at the stamp kept", chain: mid, want: []int{32 * 16, 0}},
		{name: "newer kept", chain: fresh, want: []int{32 * 16, 0}},
	}
	for _, tt := range tests {
		got := make([]int, 2)
		x.Lookup(tt.chain, got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Lookup = %v, want %v", tt.name, got, tt.want)
		}
	}
	if _, ok := x.Stamp(0, old[3]); ok {
		t.Errorf("Stamp(0, dropped checkpoint) found it")
	}
	if x.DropOlder(-1, 0) != 0 || x.Resident(99999) != 0 {
		t.Errorf("out-of-range replica not ignored")
	}
}
