package metrics

import (
	"bytes"
	"math/bits"
	"strconv"
	"unicode/utf8"

	"github.com/gpuroute/gpuroute/scoring/le"
)

// indexNL returns the index of the first newline in b at or after from, or
// -1. bytes.IndexByte is internal/bytealg's assembly on wasm too, far
// faster than a Go loop over the bytes (docs/performance.md "Go on
// wasm").
func indexNL(b []byte, from int) int {
	if i := bytes.IndexByte(b[from:], '\n'); i >= 0 {
		return from + i
	}
	return -1
}

func blankOnly(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func isNameStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':'
}

// nameBytes marks the bytes of a bare metric name: one load per byte of
// the names that start most lines, rather than four range tests.
var nameBytes = func() (t [256]bool) {
	for c := range 256 {
		t[c] = isNameStart(byte(c)) || c >= '0' && c <= '9'
	}
	return t
}()

func isLabelStart(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }

func isLabelByte(c byte) bool { return isLabelStart(c) || c >= '0' && c <= '9' }

// quoted scans a double-quoted string starting at b[i] == '"' and ending before
// end; it returns the span of the contents and the index after the closing
// quote, or ok=false on a missing quote, an escape other than \\ \" \n (the
// only ones the text format defines), or invalid UTF-8.
func quoted(b []byte, i, end int) (sp span, next int, ok bool) {
	i++
	start := i
	esc := false
	var high uint64 // the bytes seen, ORed: UTF-8 is checked only past ASCII
	for i < end {
		// Eight bytes a step to the next quote or backslash: a label
		// value is a model name or a path (docs/performance.md "Go on
		// wasm").
		for i+8 <= end {
			x := le.Uint64(b, i)
			high |= x
			if m := quoteOrBackslash(x); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= end {
			break
		}
		switch b[i] {
		case '"':
			if high&msb != 0 && !utf8.Valid(b[start:i]) {
				return span{}, 0, false
			}
			return span{start: int32(start), end: int32(i), esc: esc, ok: true}, i + 1, true
		case '\\':
			if i+1 >= end {
				return span{}, 0, false
			}
			switch b[i+1] {
			case '\\', '"', 'n':
			default:
				return span{}, 0, false
			}
			esc = true
			i += 2
		default:
			high |= uint64(b[i])
			i++
		}
	}
	return span{}, 0, false
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// quoteOrBackslash returns a word whose lowest set bit is the high bit of
// the first byte lane of x holding '"' or '\\', or 0 when none does (lanes
// above the first match may be set too: a borrow carries past it).
func quoteOrBackslash(x uint64) uint64 {
	q, s := x^(lsb*'"'), x^(lsb*'\\')
	return ((q-lsb)&^q | (s-lsb)&^s) & msb
}

// rawEqual reports whether the (possibly escaped) bytes of sp decode to want.
func rawEqual(b []byte, sp span, want string) bool {
	raw := b[sp.start:sp.end]
	if !sp.esc {
		return sameString(raw, want)
	}
	j := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '\\' && i+1 < len(raw) {
			i++
			c = unescape(raw[i])
		}
		if j >= len(want) || want[j] != c {
			return false
		}
		j++
	}
	return j == len(want)
}

// sameString reports whether raw holds want's bytes, eight a step: a
// matched line compares its name and labels with the names read, and on
// wasm comparing strings runs the runtime's byte loop (docs/performance.md
// "Go on wasm").
func sameString(raw []byte, want string) bool {
	n := len(want)
	if len(raw) != n {
		return false
	}
	if n < 8 {
		return string(raw) == want
	}
	// By words, the last one overlapping what was compared.
	for i := 0; i < n-8; i += 8 {
		if le.Uint64(raw, i) != le.StringUint64(want, i) {
			return false
		}
	}
	return le.Uint64(raw, n-8) == le.StringUint64(want, n-8)
}

func unescape(c byte) byte {
	if c == 'n' {
		return '\n'
	}
	return c // '\\' and '"' stand for themselves
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func spanEqual(b []byte, x, y span) bool {
	return string(b[x.start:x.end]) == string(b[y.start:y.end])
}

// parseValue parses a sample value as expfmt does: strconv.ParseFloat, minus
// hex floats and digit separators, which the text format does not allow.
func parseValue(t []byte) (float64, bool) {
	for _, c := range t {
		if c == 'p' || c == 'P' || c == '_' {
			return 0, false
		}
	}
	v, err := strconv.ParseFloat(string(t), 64)
	return v, err == nil
}

// spanInt parses a label value holding a non-negative decimal integer.
func spanInt(b []byte, sp span) (int64, bool) {
	if !sp.ok || sp.esc || sp.end == sp.start || sp.end-sp.start > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b[sp.start:sp.end] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
