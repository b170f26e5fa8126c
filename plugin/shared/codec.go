package shared

import (
	"errors"
	"strconv"

	"github.com/gpuroute/gpuroute/scoring/le"
)

// Sentinel errors. Every decoder error wraps exactly one of them (test with
// errors.Is); the message quotes the offending value and the rule it broke.
var (
	// ErrShort: the value ended before a field it announced.
	ErrShort = errors.New("shared: value too short")
	// ErrMagic: the value does not start with the expected magic, so it is not
	// this kind of record (wrong key, or a foreign writer).
	ErrMagic = errors.New("shared: bad magic")
	// ErrVersion: a record of a version this build cannot read, typically
	// written by a newer module during a rolling update; ignore it and keep
	// the last good value.
	ErrVersion = errors.New("shared: unsupported version")
	// ErrInvalid: a field is out of its documented range, or bytes trail
	// the record.
	ErrInvalid = errors.New("shared: invalid value")
)

// codecError carries a descriptive message and one sentinel kind.
type codecError struct {
	msg  string
	kind error
}

func (e *codecError) Error() string { return e.msg }
func (e *codecError) Unwrap() error { return e.kind }

// fail builds "shared: <what> <v>: <rule>" wrapping kind. It allocates, which is
// fine: it runs only on corrupt or foreign values, never in steady state.
func fail(kind error, what string, v int64, rule string) error {
	return &codecError{msg: "shared: " + what + " " + strconv.FormatInt(v, 10) + ": " + rule, kind: kind}
}

// Magics: four ASCII bytes per record kind, so a value read under the wrong key
// (or left by another program sharing the vm_id) is rejected up front rather
// than misparsed. A version byte follows the magic.
const (
	magicSnapshot = "GRFS"
	magicLease    = "GRLS"
	magicWork     = "GRWK"
	magicRegistry = "GRWR"
	magicAdapters = "GRAD"
	headerLen     = 5 // magic + version

	// Version is the encoding version this build writes and reads for every
	// record kind. An unknown version is ErrVersion, never a guess.
	Version = 6
)

// Little-endian helpers, hand-rolled: encoding/binary imports reflect, which
// the wasm module must not link (plugin/main_test.go holds its imports).

func appendU16(b []byte, v uint16) []byte { return append(b, byte(v), byte(v>>8)) }

func appendU32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

func appendU64(b []byte, v uint64) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24),
		byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
}

// reader walks a value with bounds checks; after the first short read every
// accessor returns zero and ok reports false, so decoders check once per
// record section instead of after every field.
type reader struct {
	b     []byte
	off   int
	short bool
}

func (r *reader) take(n int) []byte {
	if r.short || n < 0 || len(r.b)-r.off < n {
		r.short = true
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

func (r *reader) u8() uint8 {
	p := r.take(1)
	if p == nil {
		return 0
	}
	return p[0]
}

func (r *reader) u16() uint16 {
	p := r.take(2)
	if p == nil {
		return 0
	}
	return uint16(p[0]) | uint16(p[1])<<8
}

func (r *reader) u32() uint32 {
	p := r.take(4)
	if p == nil {
		return 0
	}
	return uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24
}

func (r *reader) u64() uint64 {
	p := r.take(8)
	if p == nil {
		return 0
	}
	return le.Uint64(p, 0)
}

func (r *reader) left() int { return len(r.b) - r.off }

// header checks the magic and version of a record named what.
func (r *reader) header(magic, what string) error {
	p := r.take(headerLen)
	if p == nil {
		return fail(ErrShort, what+" length", int64(len(r.b)), "shorter than the 5-byte header")
	}
	if string(p[:4]) != magic {
		return &codecError{msg: "shared: " + what + " magic " + strconv.Quote(string(p[:4])) + ": want " + strconv.Quote(magic), kind: ErrMagic}
	}
	if p[4] != Version {
		return fail(ErrVersion, what+" version", int64(p[4]), "this build reads version "+strconv.Itoa(Version))
	}
	return nil
}

// shortErr reports a short read at the reader's position.
func (r *reader) shortErr(what string) error {
	return fail(ErrShort, what+" at offset", int64(r.off), "value has "+strconv.Itoa(len(r.b))+" bytes")
}

// end rejects trailing bytes: encodings are canonical, so decode then encode
// gives back the same bytes.
func (r *reader) end(what string) error {
	if r.left() != 0 {
		return fail(ErrInvalid, what+" trailing bytes", int64(r.left()), "must be 0")
	}
	return nil
}

// appendHeader starts a record.
func appendHeader(b []byte, magic string) []byte {
	b = append(b, magic...)
	return append(b, Version)
}

// fnv1a64 continues an FNV-1a 64-bit hash (Fowler/Noll/Vo) over s.
func fnv1a64(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// ConfigIDOf hashes the ordered replica names (any stable per-replica
// identity: cluster name or address) into the ConfigID that snapshots and
// work records carry. Index i in every record means replica i of this list,
// so a worker still running another configuration (during a reload) must
// ignore records with a different ConfigID. Names are length-delimited, so
// ["ab","c"] and ["a","bc"] differ. Never returns 0, leaving 0 as "unset".
func ConfigIDOf(replicas []string) uint64 {
	h := uint64(14695981039346656037)
	for _, s := range replicas {
		n := uint32(len(s))
		for _, c := range [4]byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)} {
			h = (h ^ uint64(c)) * 1099511628211
		}
		h = fnv1a64(h, s)
	}
	if h == 0 {
		h = 1
	}
	return h
}
