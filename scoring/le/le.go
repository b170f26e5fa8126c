// Package le reads and appends little-endian words for the module's
// scanners and codecs (scoring/prefix, plugin), without encoding/binary,
// which links reflect into the plugin's wasm module.
//
//	w := le.Uint64(b, i)      // b[i:i+8] as a little-endian uint64
//	b = le.AppendUint32(b, v) // v's four bytes, low first
//
// The readers take the slice and an offset rather than a re-sliced b[i:]:
// they re-slice once, so that the word costs one bounds check. Indexing
// b[i+1] .. b[i+7] directly is checked byte by byte on wasm (the prove
// pass cannot derive them from b[i+7]). The compiler merges the byte loads
// into one unaligned load on amd64, arm64 and wasm (ssa memcombine).
// TestUint64 holds the byte order; docs/performance.md "Go on wasm"
// explains the bounds checks.
package le

// Uint16 returns b[i:i+2] as a little-endian uint16.
func Uint16(b []byte, i int) uint16 {
	w := b[i : i+2]
	return uint16(w[0]) | uint16(w[1])<<8
}

// Uint32 returns b[i:i+4] as a little-endian uint32.
func Uint32(b []byte, i int) uint32 {
	w := b[i : i+4]
	return uint32(w[0]) | uint32(w[1])<<8 | uint32(w[2])<<16 | uint32(w[3])<<24
}

// Uint64 returns b[i:i+8] as a little-endian uint64.
func Uint64(b []byte, i int) uint64 {
	w := b[i : i+8]
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

// StringUint64 is Uint64 for a string.
func StringUint64(s string, i int) uint64 {
	w := s[i : i+8]
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

// AppendUint16 appends v's two bytes to b, low first.
func AppendUint16(b []byte, v uint16) []byte { return append(b, byte(v), byte(v>>8)) }

// AppendUint32 appends v's four bytes to b, low first.
func AppendUint32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}
