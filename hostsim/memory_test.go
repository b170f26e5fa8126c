package hostsim

import "testing"

// TestMemoryBytes: the accessor reports the guest's linear memory, a whole
// number of 64 KiB pages, and it never shrinks across calls.
func TestMemoryBytes(t *testing.T) {
	_, vm := newGuestVM(t, Options{}, "mem", "")
	got := vm.MemoryBytes()
	if got == 0 || got%65536 != 0 {
		t.Fatalf("MemoryBytes() = %d, want a positive multiple of 65536", got)
	}
	if _, err := vm.Configure("root", nil); err != nil {
		t.Fatal(err)
	}
	if after := vm.MemoryBytes(); after < got {
		t.Errorf("MemoryBytes() after Configure = %d, want ≥ %d (wasm memory cannot shrink)", after, got)
	}
}
