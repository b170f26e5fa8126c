package hostsim

import (
	"encoding/binary"
	"errors"
	"strconv"
)

// EncodePairs serializes a header map in the proxy-wasm layout (spec
// abi-versions/v0.2.1 "Serialization"): u32 count, then count
// (u32 key_len, u32 value_len) pairs, then each key and value followed by a
// NUL byte. All integers are little-endian; lengths exclude the NUL.
// An empty map encodes as a zero count (4 zero bytes).
func EncodePairs(pairs [][2]string) []byte {
	return AppendPairs(nil, pairs)
}

// AppendPairs is EncodePairs appending to dst.
func AppendPairs(dst []byte, pairs [][2]string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(pairs)))
	for _, p := range pairs {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(p[0])))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(p[1])))
	}
	for _, p := range pairs {
		dst = append(dst, p[0]...)
		dst = append(dst, 0)
		dst = append(dst, p[1]...)
		dst = append(dst, 0)
	}
	return dst
}

// errPairs is the prefix of every DecodePairs error.
const errPairs = "hostsim: header map: "

// DecodePairs parses the proxy-wasm header map serialization. Following the
// spec, an empty input or a single 0x00 byte is the empty map. It never
// panics: a count or length that overruns the input, a missing NUL
// terminator or trailing bytes are errors that quote the offending numbers.
func DecodePairs(b []byte) ([][2]string, error) {
	if len(b) == 0 || (len(b) == 1 && b[0] == 0) {
		return nil, nil
	}
	if len(b) < 4 {
		return nil, errors.New(errPairs + "need 4 bytes for the count, got " + strconv.Itoa(len(b)))
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	// Each pair needs 8 bytes of lengths and 2 NULs: bound n before allocating.
	if n*10 > uint64(len(b)-4) {
		return nil, errors.New(errPairs + "count " + strconv.FormatUint(n, 10) + " needs at least " +
			strconv.FormatUint(4+n*10, 10) + " bytes, got " + strconv.Itoa(len(b)))
	}
	out := make([][2]string, n)
	lens := b[4 : 4+8*n]
	data := b[4+8*n:]
	for i := uint64(0); i < n; i++ {
		kl := uint64(binary.LittleEndian.Uint32(lens[8*i:]))
		vl := uint64(binary.LittleEndian.Uint32(lens[8*i+4:]))
		if kl+vl+2 > uint64(len(data)) {
			return nil, errors.New(errPairs + "pair " + strconv.FormatUint(i, 10) + " (key_len " +
				strconv.FormatUint(kl, 10) + ", value_len " + strconv.FormatUint(vl, 10) +
				") overruns the " + strconv.Itoa(len(data)) + " bytes left")
		}
		if data[kl] != 0 || data[kl+1+vl] != 0 {
			return nil, errors.New(errPairs + "pair " + strconv.FormatUint(i, 10) + " is not NUL-terminated")
		}
		out[i] = [2]string{string(data[:kl]), string(data[kl+1 : kl+1+vl])}
		data = data[kl+vl+2:]
	}
	if len(data) != 0 {
		return nil, errors.New(errPairs + strconv.Itoa(len(data)) + " trailing bytes after " +
			strconv.FormatUint(n, 10) + " pairs")
	}
	return out, nil
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
