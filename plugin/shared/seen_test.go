package shared

import (
	"slices"
	"testing"
)

func TestSeenAppendNew(t *testing.T) {
	type batch struct {
		replica     int
		checkpoints []uint64
		want        []uint64
	}
	tests := []struct {
		name    string
		batches []batch
	}{
		{name: "a second dispatch of one prefix adds only its new tail", batches: []batch{
			{1, []uint64{10, 20, 30}, []uint64{10, 20, 30}},
			{1, []uint64{10, 20, 40}, []uint64{40}},
		}},
		{name: "the same checkpoints on another replica are new", batches: []batch{
			{1, []uint64{10, 20}, []uint64{10, 20}},
			{2, []uint64{10, 20}, []uint64{10, 20}},
			{1, []uint64{20, 10}, nil},
		}},
		{name: "repeats inside one entry", batches: []batch{
			{0, []uint64{7, 7, 8, 7}, []uint64{7, 8}},
		}},
		{name: "hash zero and replica zero are placements like others", batches: []batch{
			{0, []uint64{0}, []uint64{0}},
			{0, []uint64{0}, nil},
			{65535, []uint64{0}, []uint64{0}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSeen(64)
			for round := range 2 { // the second after Reset: the same answers
				for _, b := range tt.batches {
					if got := s.AppendNew(nil, b.replica, b.checkpoints); !slices.Equal(got, b.want) {
						t.Fatalf("round %d: AppendNew(%d, %v) = %v, want %v", round, b.replica, b.checkpoints, got, b.want)
					}
				}
				s.Reset()
			}
		})
	}
}

// TestSeenFull: past half its slots the set admits everything, so a batch
// larger than planned appends all its placements rather than probe a full
// table; the zero Seen admits everything.
func TestSeenFull(t *testing.T) {
	s := NewSeen(16) // holds 8
	for h := range uint64(8) {
		if got := s.AppendNew(nil, 3, []uint64{h}); len(got) != 1 {
			t.Fatalf("AppendNew(3, [%d]) into a set holding %d = %v, want it added", h, h, got)
		}
	}
	if got := s.AppendNew(nil, 3, []uint64{1, 1, 9}); !slices.Equal(got, []uint64{1, 1, 9}) {
		t.Errorf("AppendNew(3, [1 1 9]) into a full set = %v, want all admitted", got)
	}
	s.Reset()
	if got := s.AppendNew(nil, 3, []uint64{1, 1}); !slices.Equal(got, []uint64{1}) {
		t.Errorf("AppendNew(3, [1 1]) after Reset = %v, want [1]", got)
	}
	var zero Seen
	if got := zero.AppendNew(nil, 3, []uint64{5, 5}); !slices.Equal(got, []uint64{5, 5}) {
		t.Errorf("zero Seen AppendNew(3, [5 5]) = %v, want both admitted", got)
	}
}

func TestSeenAllocs(t *testing.T) {
	s := NewSeen(1024)
	chain := make([]uint64, 33)
	for i := range chain {
		chain[i] = uint64(i) * 0x1234567
	}
	dst := make([]uint64, 0, len(chain))
	if a := testing.AllocsPerRun(100, func() {
		s.Reset()
		dst = s.AppendNew(dst[:0], 4, chain)
		dst = s.AppendNew(dst[:0], 4, chain)
	}); a != 0 {
		t.Errorf("Reset + AppendNew allocs = %v, want 0", a)
	}
}
