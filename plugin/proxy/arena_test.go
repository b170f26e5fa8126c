package proxy

import (
	"testing"
	"unsafe"
)

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func TestArenaAllocLookup(t *testing.T) {
	var a arena
	b := a.alloc(5)
	copy(b, "hello")
	c := a.alloc(arenaChunkBytes + 1) // forces a second chunk
	copy(c, "world")
	got, ok := a.lookup(addrOf(b), 5)
	if !ok || string(got) != "hello" {
		t.Errorf("lookup(b, 5) = %q, %v, want hello, true", got, ok)
	}
	got, ok = a.lookup(addrOf(c), 5)
	if !ok || string(got) != "world" {
		t.Errorf("lookup(c, 5) = %q, %v, want world, true", got, ok)
	}
	if _, ok := a.lookup(addrOf(b), arenaChunkBytes); ok {
		t.Errorf("lookup past the used part of a chunk = ok, want failure")
	}
	outside := make([]byte, 8)
	if _, ok := a.lookup(addrOf(outside), 1); ok {
		t.Errorf("lookup of foreign memory = ok, want failure")
	}
	if addrOf(b)%arenaAlign != 0 || addrOf(a.alloc(0))%arenaAlign != 0 {
		t.Errorf("alloc is not %d-byte aligned", arenaAlign)
	}
	if a.alloc(arenaMaxAllocBytes+1) != nil || a.alloc(-1) != nil {
		t.Errorf("alloc beyond the bound returned memory, want nil")
	}
	a.reset()
	if len(a.chunks) != 1 || cap(a.chunks[0]) < arenaChunkBytes*2 {
		t.Errorf("reset kept %d chunks, cap %d; want 1 merged chunk", len(a.chunks), cap(a.chunks[0]))
	}
	if _, ok := a.lookup(addrOf(b), 1); ok {
		t.Errorf("lookup after reset = ok, want failure")
	}
}

func TestArenaSteadyStateZeroAlloc(t *testing.T) {
	var a arena
	round := func() {
		a.reset()
		for i := 0; i < 20; i++ {
			a.alloc(5000)
		}
	}
	round()
	round()
	if n := testing.AllocsPerRun(50, round); n != 0 {
		t.Errorf("arena round allocs = %v, want 0", n)
	}
}

func BenchmarkArenaAlloc(b *testing.B) {
	b.ReportAllocs()
	var a arena
	for i := 0; i < b.N; i++ {
		if i%64 == 0 {
			a.reset()
		}
		a.alloc(256)
	}
}
