package gcdrive

import (
	"runtime"
	"testing"
	"time"
)

// Natively the collector's own workers run, so these tests show only that
// the write-barrier flag follows the collector and Finish keeps to its
// bound; the module's case, where only Finish's assists can end a cycle, is
// plugin/router's TestTickEndsCollection under hostsim.

func TestFinishWithoutCycle(t *testing.T) {
	runtime.GC() // returns with the cycle ended
	if writeBarrier.enabled {
		t.Fatal("writeBarrier.enabled = true right after runtime.GC returned")
	}
	if n := Finish(1 << 20); n != 0 {
		t.Fatalf("Finish with no cycle marking allocated %d bytes, want 0", n)
	}
}

func TestMarkingDuringCollection(t *testing.T) {
	// A goroutine keeps collecting while this one polls the flag.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !writeBarrier.enabled {
		if time.Now().After(deadline) {
			t.Fatal("no collection seen marking in 10 s of back-to-back collections: the write barrier flag is not read")
		}
	}
	const bound = 4 << 20
	if n := Finish(bound); n%ChunkBytes != 0 || n > bound {
		t.Fatalf("Finish(%d) allocated %d bytes, want whole chunks within the bound", bound, n)
	}
}
