package jsonx

import (
	"math/bits"

	"github.com/gpuroute/gpuroute/scoring/le"
)

// SWAR constants: lsb*c repeats byte c in every lane of a uint64.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// special returns a word with the high bit set in each lane of x that holds
// '"', '\\' or a byte below 0x20; only its lowest set bit is exact (a borrow
// runs upward into the lanes above a hit). Two tests cover the three cases:
// x^0x02 maps '"' to 0x20 and keeps control bytes below 0x20, so one
// "less than 0x21" test finds both (Hacker's Delight §6-1, Mycroft's trick);
// the other is "x^'\\' has a zero lane". Each test clears lanes whose high
// bit was set (bytes >= 0x80 wrap past 0x21); XOR with a constant below 0x80
// keeps a lane's high bit, so both can clear with x itself, once: 7 ALU
// operations per 8 bytes instead of 9 (wasm has no and-not; TestSpecial
// holds the contract).
func special(x uint64) uint64 {
	y := x ^ (lsb * 0x02)
	s := x ^ (lsb * '\\')
	return ((y - lsb*0x21) | (s - lsb)) &^ x
}

// nextSpecial returns the offset of the first '"', '\\' or control byte in
// d at or after i, or len(d).
func nextSpecial(d []byte, i int) int {
	// Four words per iteration, one branch: fewer, longer iterations
	// (docs/performance.md, "Go on wasm").
	for i+32 <= len(d) {
		w := d[i : i+32 : i+32]
		m0 := special(le.Uint64(w, 0)) & msb
		m1 := special(le.Uint64(w, 8)) & msb
		m2 := special(le.Uint64(w, 16)) & msb
		m3 := special(le.Uint64(w, 24)) & msb
		if m0|m1|m2|m3 != 0 {
			switch {
			case m0 != 0:
				return i + bits.TrailingZeros64(m0)>>3
			case m1 != 0:
				return i + 8 + bits.TrailingZeros64(m1)>>3
			case m2 != 0:
				return i + 16 + bits.TrailingZeros64(m2)>>3
			}
			return i + 24 + bits.TrailingZeros64(m3)>>3
		}
		i += 32
	}
	for i+16 <= len(d) {
		m0 := special(le.Uint64(d, i)) & msb
		m1 := special(le.Uint64(d, i+8)) & msb
		if m0|m1 != 0 {
			if m0 != 0 {
				return i + bits.TrailingZeros64(m0)>>3
			}
			return i + 8 + bits.TrailingZeros64(m1)>>3
		}
		i += 16
	}
	if i+8 <= len(d) {
		if m := special(le.Uint64(d, i)) & msb; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	for ; i < len(d); i++ {
		if c := d[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return len(d)
}

// isSpace is RFC 8259's insignificant whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// String scan outcomes.
const (
	sOK      = iota
	sEOF     // the input ends inside the string
	sEscape  // bad escape character
	sUEscape // \u not followed by four hex digits
	sControl // raw control character
)

// escapeByte maps the character after a backslash to the byte it stands for,
// or 0 for 'u' and invalid escapes (RFC 8259 §7).
var escapeByte = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// scanString validates string contents starting at d[i] (after the opening
// quote). It returns the offset after the closing quote and whether an escape
// was seen; on failure the offset of the offending byte (len(d) for sEOF).
// With t non-nil the string's escapes and end are recorded on t.
func scanString(d []byte, i int, t *Tape) (end int, escaped bool, st uint8) {
	mark := -1
	if t != nil {
		mark = t.open(i)
	}
	start := i
	for {
		k := nextSpecial(d, i)
		if k >= len(d) {
			t.abort(mark)
			return len(d), escaped, sEOF
		}
		switch c := d[k]; c {
		case '"':
			if t != nil {
				t.close(mark, start, k)
			}
			return k + 1, escaped, sOK
		case '\\':
			escaped = true
			if t != nil {
				mark = t.escape(mark, k)
			}
			if k+1 >= len(d) {
				t.abort(mark)
				return len(d), escaped, sEOF
			}
			e := d[k+1]
			if escapeByte[e] != 0 {
				i = k + 2
				continue
			}
			if e != 'u' {
				t.abort(mark)
				return k, escaped, sEscape
			}
			if k+6 > len(d) {
				t.abort(mark)
				if !allHex(d[k+2:]) {
					return k, escaped, sUEscape
				}
				return len(d), escaped, sEOF
			}
			if hex4(d[k+2:k+6]) < 0 {
				t.abort(mark)
				return k, escaped, sUEscape
			}
			i = k + 6
		default:
			t.abort(mark)
			return k, escaped, sControl
		}
	}
}

// StringEnd validates, by the Reader's rules (RFC 8259 §7), the string
// contents starting at d[i], just after the opening quote, and returns the
// offset of the closing quote and whether the string holds an escape; end
// is -1 when the contents are invalid or d ends first. It is for callers
// that read a known shape by offsets (openai's fast paths). Unlike
// scanString it keeps no tape and reports no error detail, and it tests
// 8 bytes at a time inline, without nextSpecial's call: it serves short
// keys and tokens (FuzzStringEnd holds it to scanString).
func StringEnd(d []byte, i int) (end int, escaped bool) {
	for {
		for i+8 <= len(d) {
			if m := special(le.Uint64(d, i)) & msb; m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < len(d) {
			if c := d[i]; c == '"' || c == '\\' || c < 0x20 {
				break
			}
			i++
		}
		if i >= len(d) {
			return -1, escaped
		}
		switch d[i] {
		case '"':
			return i, escaped
		case '\\':
			escaped = true
			if i+1 >= len(d) {
				return -1, escaped
			}
			switch e := d[i+1]; {
			case escapeByte[e] != 0:
				i += 2
			case e == 'u' && i+6 <= len(d) && hex4(d[i+2:i+6]) >= 0:
				i += 6
			default:
				return -1, escaped
			}
		default:
			return -1, escaped // a control byte
		}
	}
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// hex4 decodes four hex digits, or returns -1.
func hex4(b []byte) rune {
	_ = b[3]
	a, c, e, f := hexVal(b[0]), hexVal(b[1]), hexVal(b[2]), hexVal(b[3])
	if a|c|e|f < 0 {
		return -1
	}
	return rune(a<<12 | c<<8 | e<<4 | f)
}

func allHex(b []byte) bool {
	for _, c := range b {
		if hexVal(c) < 0 {
			return false
		}
	}
	return true
}

// scanNumber matches -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at d[i].
// ok reports a complete number ending at end; !ok with end == len(d) means
// the input ended where the number could still continue validly.
func scanNumber(d []byte, i int) (end int, ok bool) {
	n := len(d)
	if d[i] == '-' {
		i++
	}
	if i >= n {
		return n, false
	}
	switch c := d[i]; {
	case c == '0':
		i++
	case c >= '1' && c <= '9':
		i++
		for i < n && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return i, false
	}
	if i < n && d[i] == '.' {
		i++
		if i >= n {
			return n, false
		}
		if d[i] < '0' || d[i] > '9' {
			return i, false
		}
		for i < n && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	if i < n && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < n && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= n {
			return n, false
		}
		if d[i] < '0' || d[i] > '9' {
			return i, false
		}
		for i < n && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	return i, true
}

// scanLiteral matches word at d[i]. eof reports a valid head of word cut by
// the end of the input.
func scanLiteral(d []byte, i int, word string) (end int, ok, eof bool) {
	rest := d[i:]
	if len(rest) >= len(word) {
		return i + len(word), string(rest[:len(word)]) == word, false
	}
	return len(d), false, string(rest) == word[:len(rest)]
}

// shortEnd returns the offset of the closing quote of the string contents
// starting at d[i] when they are plain and shorter than 16 bytes (keys,
// roles, finish reasons), else -1; the caller then scans as usual. It
// spares the Reader's common short strings scanString's and nextSpecial's
// calls, which cost more than the scan (docs/performance.md, "Go on wasm").
func shortEnd(d []byte, i int) int {
	if i+16 > len(d) {
		return -1
	}
	w := d[i : i+16 : i+16]
	m := special(le.Uint64(w, 0)) & msb
	j := 0
	if m == 0 {
		m = special(le.Uint64(w, 8)) & msb
		j = 8
	}
	if m == 0 {
		return -1
	}
	if j += bits.TrailingZeros64(m) >> 3; w[j] != '"' {
		return -1
	}
	return i + j
}
