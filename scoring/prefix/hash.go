package prefix

import (
	"math/bits"

	"github.com/gpuroute/gpuroute/scoring/le"
)

// The hash is this package's own: a word-at-a-time multiply–rotate over
// little-endian 64-bit words with a splitmix64-style finalizer (the
// constants are the 64-bit golden ratio and two odd multipliers from
// Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
// OOPSLA 2014). It must give the same value in every process, VM and
// gateway, which rules out hash/maphash (randomly seeded per process).
// It is not cryptographic: an adversary can build colliding prompts, which
// costs them a cache miss, nothing more.
const (
	mixK0 = 0x9e3779b97f4a7c15
	mixK1 = 0xbf58476d1ce4e5b9
	mixK2 = 0x94d049bb133111eb
)

// Finalize is the splitmix64 finalizer: full avalanche of a 64-bit state,
// for keys that combine several hashes (scoring keys its output
// estimators by model and adapter with it).
func Finalize(h uint64) uint64 {
	h ^= h >> 30
	h *= mixK1
	h ^= h >> 27
	h *= mixK2
	h ^= h >> 31
	return h
}

// hashBytes hashes b starting from state seed.
func hashBytes(seed uint64, b []byte) uint64 {
	h := seed ^ uint64(len(b))*mixK0
	for len(b) >= 32 {
		// Four words per iteration: two independent lanes keep the
		// multiplier busy.
		w0 := le.Uint64(b, 0)
		w1 := le.Uint64(b, 8)
		w2 := le.Uint64(b, 16)
		w3 := le.Uint64(b, 24)
		a := bits.RotateLeft64((h^w0)*mixK1, 31) * mixK2
		c := bits.RotateLeft64((w1^mixK0)*mixK2, 29) * mixK1
		a = bits.RotateLeft64((a^w2)*mixK1, 31) * mixK2
		c = bits.RotateLeft64((c^w3)*mixK2, 29) * mixK1
		h = a ^ bits.RotateLeft64(c, 17)
		b = b[32:]
	}
	for len(b) >= 8 {
		h = bits.RotateLeft64((h^le.Uint64(b, 0))*mixK1, 31) * mixK2
		b = b[8:]
	}
	if len(b) > 0 {
		var w uint64
		for i := len(b) - 1; i >= 0; i-- {
			w = w<<8 | uint64(b[i])
		}
		h = bits.RotateLeft64((h^w)*mixK1, 31) * mixK2
	}
	return Finalize(h)
}

// HashString returns the package's stable 64-bit hash of s (for
// Replica.AddrHash and adapter names). Same input, same value, everywhere.
func HashString(s string) uint64 {
	// Hash in place through a fixed buffer: no conversion allocation.
	var buf [64]byte
	h := uint64(mixK2)
	for len(s) > 0 {
		n := copy(buf[:], s)
		h = hashBytes(h, buf[:n])
		s = s[n:]
	}
	return h
}

// Rendezvous returns the highest-random-weight score of a node for key
// (Thaler & Ravishankar, "Using name-based mappings to increase hit rates",
// IEEE/ACM ToN 1998): every proxy computing it for the same key and node
// set picks the same node, and removing a node moves only its keys.
func Rendezvous(key, node uint64) uint64 {
	return Finalize(key ^ Finalize(node+mixK0))
}
