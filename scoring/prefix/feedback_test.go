package prefix

import (
	"slices"
	"testing"
)

// stamp returns the clock at which replica's checkpoint chainHash was last
// recorded, and false when x does not hold it: the tests' reference,
// read entry by entry.
func stamp(x *Index, replica int, chainHash uint64) (uint32, bool) {
	if replica < 0 || replica >= len(x.count) {
		return 0, false
	}
	i := x.find(uint32(chainHash>>32), uint16(replica+1))
	if i < 0 {
		return 0, false
	}
	return x.slots[i].stamp, true
}

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
	at, ok := stamp(x, 0, mid[31])
	if !ok || at != x.Clock() {
		t.Fatalf("stamp(0, mid's tip) = %d, %v, want %d, true", at, ok, x.Clock())
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
	if _, ok := stamp(x, 0, old[3]); ok {
		t.Errorf("stamp(0, dropped checkpoint) found it")
	}
	if x.DropOlder(-1, 0) != 0 || x.Resident(99999) != 0 {
		t.Errorf("out-of-range replica not ignored")
	}
}

// TestRecordCheckpointsBefore: the stamps reported are those the entries had
// before the record (held and not held), the record is RecordCheckpoints',
// and only the first len(stamps) checkpoints are reported.
func TestRecordCheckpointsBefore(t *testing.T) {
	const stride = 4
	build := func() (*Index, []uint64) {
		x := NewIndex(IndexConfig{Stride: stride})
		chain := chainN(1, 0, 40, 40)
		x.Record(0, chain[:12]) // the first three checkpoints held
		x.Record(1, chain)      // another replica's entries are not replica 0's
		x.Record(0, chain[:4])  // the first one refreshed later
		return x, x.AppendCheckpoints(nil, chain)
	}
	want, checkpoints := build()
	var wantStamps []uint32
	var wantHeld []bool
	for _, h := range checkpoints[:6] {
		at, ok := stamp(want, 0, h)
		wantStamps, wantHeld = append(wantStamps, at), append(wantHeld, ok)
	}
	want.RecordCheckpoints(0, checkpoints)

	got, _ := build()
	stamps, held := make([]uint32, 6), make([]bool, 6)
	got.RecordCheckpointsBefore(0, checkpoints, stamps, held)
	if !slices.Equal(stamps, wantStamps) || !slices.Equal(held, wantHeld) {
		t.Errorf("before the record: stamps %v held %v, want %v %v", stamps, held, wantStamps, wantHeld)
	}
	if !held[0] || !held[2] || held[3] || stamps[0] == stamps[1] {
		t.Errorf("held %v stamps %v: want the first three held, the first refreshed later", held, stamps)
	}
	if got.Clock() != want.Clock() {
		t.Errorf("clock %d, want %d", got.Clock(), want.Clock())
	}
	for _, h := range checkpoints {
		a, aok := stamp(got, 0, h)
		b, bok := stamp(want, 0, h)
		if a != b || aok != bok {
			t.Errorf("after the record: stamp = %d, %v, want %d, %v", a, aok, b, bok)
		}
	}
	stamps[0], held[0] = 7, true
	got.RecordCheckpointsBefore(-1, checkpoints, stamps, held)
	if stamps[0] != 0 || held[0] {
		t.Errorf("out-of-range replica: stamps %v held %v, want cleared", stamps, held)
	}
}
