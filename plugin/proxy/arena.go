package proxy

import "unsafe"

// arena is the pinned scratch memory behind proxy_on_memory_allocate and the
// outbound encodings (header maps, property paths). The host copies values into
// what proxy_on_memory_allocate returns while a host call is in progress, so the
// memory must stay reachable until the guest has read it: Go's collector never
// moves objects, and the chunks stay referenced from the arena until reset.
//
// Lifetime: reset at the entry of every top-level callback, so slices into the
// arena are valid until the callback that obtained them returns. Steady state
// allocates nothing: after a callback that needed several chunks, reset merges
// them into one chunk big enough for the same pattern next time (up to
// arenaMaxRetainBytes).
//
// Not safe for concurrent use; a wasm VM is single-threaded and the host calls in
// one callback at a time.
type arena struct {
	// chunks[i][:len] is handed out, [len:cap] is free. Only the last chunk is
	// bumped.
	chunks [][]byte
}

const (
	arenaChunkBytes     = 64 << 10
	arenaMaxRetainBytes = 4 << 20
	// arenaMaxAllocBytes bounds one request from the host. Envoy caps guest
	// memory at 1 GiB (docs/abi.md "Envoy behaviour"); beyond this we answer 0 (failure) instead
	// of letting the runtime abort on out-of-memory.
	arenaMaxAllocBytes = 256 << 20
	arenaAlign         = 8
)

// alloc returns n bytes (not zeroed) that stay valid until reset, or nil when n
// exceeds arenaMaxAllocBytes. The result is 8-byte aligned and its capacity is
// at least 1 (n == 0 still reserves one aligned slot), so unsafe.SliceData of it
// is always a real address inside the arena.
func (a *arena) alloc(n int) []byte {
	if n < 0 || n > arenaMaxAllocBytes {
		return nil
	}
	step := (n + arenaAlign - 1) &^ (arenaAlign - 1)
	if step == 0 {
		step = arenaAlign
	}
	if k := len(a.chunks); k > 0 {
		c := a.chunks[k-1]
		if cap(c)-len(c) >= step {
			off := len(c)
			a.chunks[k-1] = c[:off+step]
			return c[off : off+n : off+step]
		}
	}
	size := arenaChunkBytes
	if step > size {
		size = step
	}
	c := make([]byte, step, size)
	a.chunks = append(a.chunks, c)
	return c[:n:step]
}

// reset frees everything handed out. With several chunks in use it replaces them
// by one chunk of their total capacity (bounded), so the next callback with the
// same pattern fits without allocating.
func (a *arena) reset() {
	switch len(a.chunks) {
	case 0:
		return
	case 1:
		if cap(a.chunks[0]) > arenaMaxRetainBytes {
			a.chunks[0] = make([]byte, 0, arenaChunkBytes)
		}
		a.chunks[0] = a.chunks[0][:0]
		return
	}
	total := 0
	for _, c := range a.chunks {
		total += cap(c)
	}
	if total > arenaMaxRetainBytes {
		total = arenaMaxRetainBytes
	}
	clear(a.chunks)
	a.chunks = append(a.chunks[:0], make([]byte, 0, total))
}

// lookup returns the n bytes at address addr if they lie inside memory this
// arena handed out, so a pointer written by the host is turned into a slice
// without fabricating a Go pointer from an integer.
func (a *arena) lookup(addr uintptr, n int) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	for _, c := range a.chunks {
		if len(c) == 0 {
			continue
		}
		base := uintptr(unsafe.Pointer(unsafe.SliceData(c)))
		if addr < base || addr-base >= uintptr(len(c)) {
			continue
		}
		off := int(addr - base)
		if n > len(c)-off {
			return nil, false
		}
		return c[off : off+n : off+n], true
	}
	return nil, false
}
