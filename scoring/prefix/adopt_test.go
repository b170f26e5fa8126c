package prefix

import (
	"slices"
	"testing"
)

// TestIndexAdopt: an index adopted under a new numbering answers for each
// renumbered replica what old answered for it, and nothing for a dropped
// one; a smaller entry budget keeps the most recently recorded entries.
func TestIndexAdopt(t *testing.T) {
	cfg := IndexConfig{BlockChars: 64, Stride: 4, MaxReplicas: 4}
	old := NewIndex(cfg)
	chains := [][]uint64{chainN(1, 0, 80, 80), chainN(2, 0, 40, 40), chainN(3, 0, 60, 60)}
	for r, c := range chains {
		old.Record(r, c)
	}
	x := NewIndex(IndexConfig{BlockChars: 64, Stride: 4, MaxReplicas: 5})
	x.Adopt(old, []int{3, -1, 0})
	tests := []struct {
		name  string
		chain []uint64
		from  int // old replica, -1: none
		to    int
	}{
		{name: "kept 0 → 3", chain: chains[0], from: 0, to: 3},
		{name: "dropped 1", chain: chains[1], from: -1, to: 1},
		{name: "kept 2 → 0", chain: chains[2], from: 2, to: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			was, got := make([]int, 4), make([]int, 5)
			old.Lookup(tc.chain, was)
			x.Lookup(tc.chain, got)
			want := make([]int, 5)
			if tc.from >= 0 {
				want[tc.to] = was[tc.from]
			}
			if !slices.Equal(got, want) {
				t.Errorf("Lookup(chain) after Adopt = %v, want %v (old answered %v)", got, want, was)
			}
		})
	}

	// A budget of a quarter: the oldest recorded go.
	small := NewIndex(IndexConfig{BlockChars: 64, Stride: 4, MaxReplicas: 4, MaxEntries: 16})
	big := NewIndex(cfg)
	for i := range 8 {
		big.Record(0, chainN(uint64(10+i), 0, 16, 16)) // 4 checkpoints each
	}
	small.Adopt(big, []int{0})
	out := make([]int, 1)
	small.Lookup(chainN(17, 0, 16, 16), out)
	if out[0] == 0 {
		t.Errorf("Lookup(newest chain) after Adopt into a small budget = 0, want it kept")
	}
	small.Lookup(chainN(10, 0, 16, 16), out)
	if out[0] != 0 || small.Len() > 16 {
		t.Errorf("after Adopt into a budget of 16: oldest chain %d tokens, %d entries; want 0 and at most 16", out[0], small.Len())
	}
}
