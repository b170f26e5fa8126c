// Package gcdrive ends a garbage collection that a proxy-wasm module would
// otherwise leave half done.
//
// Go's collector marks concurrently: background workers (goroutines) do
// most of the work, and goroutines that allocate while it marks pay
// assists in proportion. A module built as a WASI reactor runs only the
// goroutine of the host's callback and never yields (the runtime's other
// goroutines would arm timers, and from then on every stop of the world
// polls a host that may not implement poll_oneoff: docs/abi.md "Envoy
// behaviour"),
// so the workers never run and a cycle ends only through assists. The
// router's request path allocates nothing, so a cycle begun by a
// configuration change or a tick goes on marking through thousands of
// requests, and while it does every pointer store pays the write barrier
// (TestTickEndsCollection; docs/performance.md "Request path").
//
// Finish ends such a cycle where latency does not matter (after a tick or
// a configuration): it allocates garbage until the assists the
// allocations owe have done the remaining marking, which ends the cycle on
// the calling goroutine as any assist may, without a yield.
package gcdrive

import _ "unsafe" // for go:linkname

// writeBarrier is the runtime's flag for the compiler-inserted write
// barrier, on exactly while a collection marks (runtime/mgc.go: on in the
// mark and mark-termination phases). The runtime publishes the symbol for
// linkname and promises not to change its type (go.dev/issue/67401); no
// exported API tells whether a cycle is marking.
//
//go:linkname writeBarrier runtime.writeBarrier
var writeBarrier struct {
	enabled bool
	pad     [3]byte
	alignme uint64
}

// ChunkBytes is the size of each allocation Finish makes: above Go's
// largest size class (32 KiB), so each is one span of its own that the
// next sweep frees whole, and the size of an assist's minimum of scan
// work (runtime's gcOverAssistWork), so each allocation while marking
// buys at least one assist.
const ChunkBytes = 64 << 10

// sink keeps Finish's chunks from being stack-allocated or elided: a
// write the compiler cannot drop, never read.
//
//lint:ignore U1000 only written, to make each chunk a heap allocation
var sink []byte

// Finish allocates up to maxBytes of garbage, ChunkBytes at a time, until
// no collection is marking, and returns how many bytes it allocated (0
// when none was). A cycle whose marking needs more than maxBytes of
// assists is left marking: call Finish again later.
func Finish(maxBytes int) int {
	n := 0
	for writeBarrier.enabled && n+ChunkBytes <= maxBytes {
		sink = make([]byte, ChunkBytes)
		n += ChunkBytes
	}
	sink = nil
	return n
}
