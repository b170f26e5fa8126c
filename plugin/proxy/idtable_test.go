package proxy

import (
	"math/rand/v2"
	"testing"
)

// TestIDTableMatchesMap holds idTable to a Go map under random puts,
// deletes and gets: consecutive ids as a host hands them out (with the
// oldest deleted, as streams end) and random ones that collide.
func TestIDTableMatchesMap(t *testing.T) {
	tests := []struct {
		name string
		id   func(rng *rand.Rand, step int) uint32
	}{
		{name: "consecutive ids", id: func(rng *rand.Rand, step int) uint32 { return uint32(step/3 + 1 + rng.IntN(40)) }},
		{name: "few colliding ids", id: func(rng *rand.Rand, _ int) uint32 { return uint32(rng.IntN(64)) }},
		{name: "any ids", id: func(rng *rand.Rand, _ int) uint32 { return rng.Uint32() % 5000 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var tab idTable[int]
			want := map[uint32]int{}
			for step := range 20000 {
				id := tt.id(rng, step)
				switch rng.IntN(3) {
				case 0:
					tab.put(id, step)
					if id != 0 {
						want[id] = step
					}
				case 1:
					_, present := want[id]
					if got := tab.del(id); got != present {
						t.Fatalf("step %d: del(%d) = %v, want %v", step, id, got, present)
					}
					delete(want, id)
				}
				got, ok := tab.get(id)
				w, wok := want[id]
				if ok != wok || got != w {
					t.Fatalf("step %d: get(%d) = %d, %v; want %d, %v", step, id, got, ok, w, wok)
				}
				if tab.n != len(want) {
					t.Fatalf("step %d: %d entries, want %d", step, tab.n, len(want))
				}
			}
			for id, w := range want {
				if got, ok := tab.get(id); !ok || got != w {
					t.Fatalf("get(%d) = %d, %v at the end; want %d", id, got, ok, w)
				}
			}
		})
	}
}

func TestIDTableZeroID(t *testing.T) {
	var tab idTable[string]
	tab.put(0, "vm")
	if v, ok := tab.get(0); ok || tab.n != 0 {
		t.Errorf("get(0) after put(0) = %q, %v with %d entries; want absent, 0", v, ok, tab.n)
	}
	if tab.del(7) { // empty: nothing to do
		t.Errorf("del(7) on an empty table = true, want false")
	}
	if _, ok := tab.get(7); ok {
		t.Errorf("get(7) on an empty table = present")
	}
}

func TestIDTableAllocs(t *testing.T) {
	var tab idTable[int]
	for id := uint32(1); id <= 64; id++ {
		tab.put(id, int(id))
	}
	for id := uint32(1); id <= 64; id++ {
		tab.del(id)
	}
	next := uint32(100)
	if a := testing.AllocsPerRun(1000, func() {
		tab.put(next, 1)
		_, _ = tab.get(next)
		tab.del(next - 10)
		next++
	}); a != 0 {
		t.Errorf("put/get/del below the high-water mark allocs = %v, want 0", a)
	}
}
