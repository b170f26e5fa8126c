package jsonx

import (
	"unicode/utf16"
	"unicode/utf8"
)

// Escape decoding outcomes of decodeU.
const (
	uOK  = iota
	uEOF // the input ends inside the escape, or inside a following one
	uEnd // a high surrogate ends the input: its low half may follow
	uBad
)

// decodeU decodes the \u escape at d[k] (d[k:k+2] == `\u`), joining a
// surrogate pair. It returns the rune and the escape's length (6 or 12). A
// lone surrogate is U+FFFD, as in encoding/json. uEOF means d ends before it
// is known what the escape is: inside it, or after a high surrogate whose
// low half may follow.
func decodeU(d []byte, k int) (rune, int, uint8) {
	if k+6 > len(d) {
		if allHex(d[k+2:]) {
			return 0, 0, uEOF
		}
		return 0, 0, uBad
	}
	h := hex4(d[k+2 : k+6])
	switch {
	case h < 0:
		return 0, 0, uBad
	case !utf16.IsSurrogate(h):
		return h, 6, uOK
	case h >= 0xDC00: // low half without a high one
		return utf8.RuneError, 6, uOK
	}
	j := k + 6
	switch {
	case j >= len(d):
		return utf8.RuneError, 6, uEnd
	case d[j] != '\\':
		return utf8.RuneError, 6, uOK
	case j+1 >= len(d):
		return 0, 0, uEOF
	case d[j+1] != 'u':
		return utf8.RuneError, 6, uOK
	case j+6 > len(d):
		if allHex(d[j+2:]) {
			return 0, 0, uEOF
		}
		return utf8.RuneError, 6, uOK
	}
	if l := hex4(d[j+2 : j+6]); l >= 0xDC00 && l <= 0xDFFF {
		return utf16.DecodeRune(h, l), 12, uOK
	}
	return utf8.RuneError, 6, uOK
}

// stringCut returns the length of the reliable head of string contents s
// that the input cut: no escape and no surrogate pair is split.
func stringCut(s []byte) int {
	i := 0
	for {
		k := nextBackslash(s, i)
		if k >= len(s) {
			return len(s)
		}
		if k+1 >= len(s) {
			return k
		}
		if s[k+1] != 'u' {
			i = k + 2
			continue
		}
		_, n, st := decodeU(s, k)
		if st != uOK {
			return k
		}
		i = k + n
	}
}

// nextBackslash returns the offset of the first '\\' in s at or after i, or
// len(s). Validated string contents hold no '"' or control byte, so the
// string scan's SWAR test serves; on other input it stops early, harmlessly.
func nextBackslash(s []byte, i int) int {
	for {
		k := nextSpecial(s, i)
		if k >= len(s) || s[k] == '\\' {
			return k
		}
		i = k + 1
	}
}

// AppendUnescape appends the decoded text of raw, string contents as
// Value.Raw returns them, to dst and returns the extended slice. The decoded
// text is never longer than raw, so a dst with len(raw) spare capacity never
// grows. Input that is not valid string contents is copied as is where it is
// not (a bad or cut escape stays literal); it never panics.
func AppendUnescape(dst, raw []byte) []byte {
	i := 0
	for {
		k := nextBackslash(raw, i)
		dst = append(dst, raw[i:k]...)
		if k+1 >= len(raw) {
			return append(dst, raw[k:]...)
		}
		if b := escapeByte[raw[k+1]]; b != 0 {
			dst = append(dst, b)
			i = k + 2
			continue
		}
		if raw[k+1] == 'u' {
			// raw is whole string contents, so a high surrogate at its end is
			// lone (uEnd).
			if r, n, st := decodeU(raw, k); st == uOK || st == uEnd {
				dst = utf8.AppendRune(dst, r)
				i = k + n
				continue
			}
		}
		dst = append(dst, '\\')
		i = k + 1
	}
}

// unescapeInto decodes raw into buf, reporting false if raw is longer than
// buf (decoding never lengthens, so the result then always fits).
func unescapeInto(buf, raw []byte) ([]byte, bool) {
	if len(raw) > len(buf) {
		return nil, false
	}
	return AppendUnescape(buf[:0], raw), true
}

// ParseInt parses the JSON integer b (-?(0|[1-9][0-9]*)) into an int64. It
// rejects fractions, exponents, leading zeros, signs other than a leading
// '-', and values outside the int64 range: the fields the plugin reads are
// counts, and servers reject non-integral ones too.
func ParseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 1 && b[0] == '0' || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0') // 19 digits cannot overflow uint64
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}
