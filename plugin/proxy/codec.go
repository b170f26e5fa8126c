package proxy

import (
	"errors"
	"strconv"
)

// Header map serialization, spec v0.2.1 "Serialization" (docs/abi.md "proxy-wasm ABI v0.2.1"): all
// integers u32 little-endian,
//
//	u32 N, then N × (u32 key_len, u32 val_len), then per pair: key, 0x00, value, 0x00
//
// Lengths exclude the NUL. The same layout carries the headers and trailers of
// proxy_http_call and proxy_send_local_response and Envoy's map-valued
// properties. These functions are pure so they can be fuzzed natively.

// pairsHeaderSize is the u32 count; pairSizesSize the two u32 lengths per pair.
const (
	pairsHeaderSize = 4
	pairSizesSize   = 8
)

// errPairsTruncated and friends describe malformed input; they are values so
// that decoding a bad map does not allocate.
var (
	errPairsTruncated = errors.New("proxy: header map: truncated")
	errPairsNUL       = errors.New("proxy: header map: key or value not followed by NUL")
	errPairsTrailing  = errors.New("proxy: header map: trailing bytes after last pair")
)

// EncodedPairsLen returns the number of bytes AppendPairs adds for pairs.
func EncodedPairsLen(pairs [][2]string) int {
	n := pairsHeaderSize + pairSizesSize*len(pairs)
	for i := range pairs {
		n += len(pairs[i][0]) + len(pairs[i][1]) + 2
	}
	return n
}

// AppendPairs appends the serialization of pairs to dst and returns the
// extended slice. An empty map encodes as a u32 zero (4 bytes), which the spec's
// layout allows. It allocates only when dst lacks capacity.
func AppendPairs(dst []byte, pairs [][2]string) []byte {
	start := len(dst)
	need := EncodedPairsLen(pairs)
	if cap(dst)-start < need {
		grown := make([]byte, start, start+need)
		copy(grown, dst)
		dst = grown
	}
	dst = dst[:start+need]
	b := dst[start:]
	putLE32(b, uint32(len(pairs)))
	off := pairsHeaderSize
	for i := range pairs {
		putLE32(b[off:], uint32(len(pairs[i][0])))
		putLE32(b[off+4:], uint32(len(pairs[i][1])))
		off += pairSizesSize
	}
	for i := range pairs {
		off += copy(b[off:], pairs[i][0])
		b[off] = 0
		off++
		off += copy(b[off:], pairs[i][1])
		b[off] = 0
		off++
	}
	return dst
}

// VisitPairs decodes a serialized map and calls visit for each pair in order,
// with key and value aliasing data (no copy, no allocation). visit returns false
// to stop early. The whole input is validated before the first visit, so visit
// never sees a prefix of a malformed map. Both spec encodings of the empty map
// (0 bytes, or a single 0x00) are accepted.
func VisitPairs(data []byte, visit func(key, value []byte) bool) error {
	n, err := checkPairs(data)
	if err != nil || n == 0 {
		return err
	}
	sizes := pairsHeaderSize
	off := pairsHeaderSize + pairSizesSize*n
	for i := 0; i < n; i++ {
		kl := int(le32(data[sizes:]))
		vl := int(le32(data[sizes+4:]))
		sizes += pairSizesSize
		key := data[off : off+kl : off+kl]
		off += kl + 1
		val := data[off : off+vl : off+vl]
		off += vl + 1
		if !visit(key, val) {
			return nil
		}
	}
	return nil
}

// DecodePairs appends the pairs of a serialized map to dst (caller-owned
// storage, reused across calls) and returns it. Keys and values alias data.
// On error dst is returned unchanged.
func DecodePairs(dst [][2][]byte, data []byte) ([][2][]byte, error) {
	out := dst
	err := VisitPairs(data, func(k, v []byte) bool {
		out = append(out, [2][]byte{k, v})
		return true
	})
	if err != nil {
		return dst, err
	}
	return out, nil
}

// DecodePairsStrings decodes a serialized map into freshly allocated strings,
// for callers that keep the result beyond the current callback.
func DecodePairsStrings(data []byte) ([][2]string, error) {
	n, err := checkPairs(data)
	if err != nil || n == 0 {
		return nil, err
	}
	out := make([][2]string, 0, n)
	err = VisitPairs(data, func(k, v []byte) bool {
		out = append(out, [2]string{string(k), string(v)})
		return true
	})
	return out, err
}

// checkPairs validates the whole layout and returns the pair count. All
// arithmetic is in int (64-bit on every target we build) so hostile u32 lengths
// cannot overflow.
func checkPairs(data []byte) (int, error) {
	if len(data) == 0 || (len(data) == 1 && data[0] == 0) {
		return 0, nil
	}
	if len(data) < pairsHeaderSize {
		return 0, errPairsTruncated
	}
	n := int(le32(data))
	// Each pair needs at least its 8 size bytes and two NULs.
	if n > (len(data)-pairsHeaderSize)/(pairSizesSize+2) {
		return 0, pairsCountError(n, len(data))
	}
	sizes := pairsHeaderSize
	off := pairsHeaderSize + pairSizesSize*n
	for i := 0; i < n; i++ {
		kl := int(le32(data[sizes:]))
		vl := int(le32(data[sizes+4:]))
		sizes += pairSizesSize
		if kl > len(data)-off-1 {
			return 0, errPairsTruncated
		}
		off += kl
		if data[off] != 0 {
			return 0, errPairsNUL
		}
		off++
		if vl > len(data)-off-1 {
			return 0, errPairsTruncated
		}
		off += vl
		if data[off] != 0 {
			return 0, errPairsNUL
		}
		off++
	}
	if off != len(data) {
		return 0, errPairsTrailing
	}
	return n, nil
}

func pairsCountError(n, size int) error {
	return errors.New("proxy: header map: " + strconv.Itoa(n) + " pairs cannot fit in " + strconv.Itoa(size) + " bytes")
}

// AppendPropertyPath appends the proxy_get_property path encoding of segments
// (segments joined by NUL, no trailing NUL; as Envoy splits it) to
// dst.
func AppendPropertyPath(dst []byte, segments []string) []byte {
	for i, s := range segments {
		if i > 0 {
			dst = append(dst, 0)
		}
		dst = append(dst, s...)
	}
	return dst
}

// le32 and putLE32 are little-endian u32 access. Not encoding/binary: it
// imports reflect, which the wasm module must not link (plugin/main_test.go).
func le32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func putLE32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
