// Package le reads little-endian words from byte slices for the module's
// scanners and codecs, without encoding/binary (which links reflect into
// the module).
package le

// Uint64 returns b[i:i+8] as a little-endian uint64. The compiler merges
// the byte loads into one unaligned load on amd64, arm64 and wasm (ssa
// memcombine). The re-slice makes one bounds check: indexing b[i+1] ..
// b[i+7] directly is checked byte by byte on wasm (the prove pass cannot
// derive them from b[i+7]), eight compare-and-branch sequences per load
// that made string scanning under wazero several times slower.
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
