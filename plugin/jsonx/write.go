package jsonx

import (
	"math/bits"
	"slices"
	"unicode/utf8"

	"github.com/gpuroute/gpuroute/scoring/le"
)

// Writer is io.Writer, declared here so the package needs no io import.
type Writer interface {
	Write(p []byte) (n int, err error)
}

// minDirect is the shortest literal run WriteString hands to the writer
// straight from the input rather than through scratch.
const minDirect = 64

// shortPlain is the longest string WriteString tries to write straight from
// the input before setting up its decoding loop.
const shortPlain = 128

// WriteString consumes the string value due next and writes its decoded
// text to w in one pass that also validates it. With a scratch of at least
// 128 bytes the text is decoded into scratch and written in scratch-sized
// pieces (decodeRun: copying every word is cheaper than restarting a scan
// at each escape). With a shorter scratch, escapes are
// decoded into it, and short literal runs copied there, so w sees few
// large writes; a literal run of at least max(64, len(scratch)/8) bytes (at
// most len(scratch)) is written straight from the input, with no copy. A
// scratch shorter than 16 bytes is replaced by a 16-byte buffer of the
// Reader's. A string of at most 128 bytes without escapes goes to w in one
// write straight from the input. In prefix mode a cut string writes its
// reliable head (as Value would return it) and Truncated turns
// true. It returns w's first error (the string is still read to its end, so
// the Reader stays usable); a syntax error is recorded for Err and stops the
// writing, so call it on validated input if partial output matters.
func (r *Reader) WriteString(w Writer, scratch []byte) error {
	return r.writeString(w, scratch, true)
}

// writeString is WriteString; short false skips the short-string path, so
// that FuzzWriteString can hold that path to the decoding loop.
func (r *Reader) writeString(w Writer, scratch []byte, short bool) error {
	i, ok := r.opening('"', whatString)
	if !ok {
		return nil
	}
	d := r.data
	// A short string without escapes (a role, a name, a chat turn) is its
	// own decoded text: written straight from the input, it skips the
	// scratch set-up and the copy, which cost more than its scan. Longer
	// strings pay for this look at most shortPlain bytes.
	if e := min(len(d), i+1+shortPlain); short {
		if k := nextSpecial(d[:e], i+1); k < e && d[k] == '"' {
			var werr error
			if k > i+1 {
				_, werr = w.Write(d[i+1 : k])
			}
			r.done(k + 1)
			return werr
		}
	}
	if len(scratch) < len(r.small) {
		scratch = r.small[:]
	}
	direct := min(max(minDirect, len(scratch)/8), len(scratch))
	if r.replay != nil {
		if e, ok := r.replay.find(i + 1); ok {
			if end, _ := r.replay.end(e); end >= 0 && end < len(d) && d[end] == '"' {
				return r.writeTaped(w, scratch, direct, i+1, e, end)
			}
		}
	}
	var werr error
	n := 0   // decoded bytes waiting in scratch
	i++      // first content byte
	run := i // start of the literal run not yet written or copied
	for {
		if len(scratch) >= minDecode {
			// The common case, in one tight loop: plain words and
			// single-character escapes decoded straight into scratch.
			for {
				i, n = decodeRun(d, i, scratch, n)
				if n+decodeRoom <= len(scratch) {
					break
				}
				if werr == nil {
					_, werr = w.Write(scratch[:n])
				}
				n = 0
			}
			run = i
		}
		k := nextSpecial(d, i)
		c := byte('"')
		if k < len(d) {
			c = d[k]
		}
		if c != '\\' || k+1 >= len(d) {
			// End of the string, of the input, or an error: flush the run.
			if k-run >= direct || n+k-run > len(scratch) {
				if werr == nil && n > 0 {
					_, werr = w.Write(scratch[:n])
				}
				n = 0
			}
			if k-run >= direct {
				if werr == nil {
					_, werr = w.Write(d[run:k])
				}
			} else {
				n += copy(scratch[n:], d[run:k])
			}
			if werr == nil && n > 0 {
				_, werr = w.Write(scratch[:n])
			}
			switch {
			case k >= len(d) || c == '\\':
				r.eof() // a cut run is written whole; a cut escape is not
			case c == '"':
				r.done(k + 1)
			default:
				r.fail(BadSyntax, k, whatControl)
			}
			return werr
		}
		// An escape at k: decode it after the run.
		e := d[k+1]
		b := escapeByte[e]
		var u rune
		adv := 2
		if b == 0 {
			if e != 'u' {
				r.fail(BadSyntax, k, whatEscape)
				return werr
			}
			var st uint8
			if u, adv, st = decodeU(d, k); st != uOK {
				// Flush what precedes the escape, then fail or cut.
				if werr == nil && n > 0 {
					_, werr = w.Write(scratch[:n])
				}
				if werr == nil && k > run {
					_, werr = w.Write(d[run:k])
				}
				if st == uEOF || st == uEnd {
					r.eof()
				} else {
					r.fail(BadSyntax, k, whatUEscape)
				}
				return werr
			}
		}
		if k-run >= direct || n+k-run+utf8.UTFMax > len(scratch) {
			if werr == nil && n > 0 {
				_, werr = w.Write(scratch[:n])
			}
			n = 0
			if k-run >= direct || k-run+utf8.UTFMax > len(scratch) {
				if werr == nil && k > run {
					_, werr = w.Write(d[run:k])
				}
				run = k
			}
		}
		n += copy(scratch[n:], d[run:k])
		if b != 0 {
			scratch[n] = b
			n++
		} else {
			n += utf8.EncodeRune(scratch[n:], u)
		}
		i = k + adv
		run = i
	}
}

// decodeRun's bounds: it needs decodeRoom bytes free in dst to take a step
// (a 64-byte window plus a decoded escape), and WriteString uses it only
// with a scratch of at least minDecode bytes.
const (
	decodeRoom = 72
	minDecode  = 128
)

// decodeRun decodes string contents from d[i:] into dst[n:] 64 bytes at a
// time while they are plain bytes or single-character escapes, and returns
// the new i and n. It stops at a '"', a control byte, a \u or bad escape,
// within 64 bytes of the end of d, or when fewer than decodeRoom bytes of
// dst are free; WriteString's general loop takes over from there.
//
// Each window is copied whole (eight 8-byte stores) and n advanced only
// past the plain bytes, so an escape costs a few instructions instead of a
// memmove and a scan restart. The window is tested with one branch (the
// words' tests ORed together, one word live at a time) and only a window
// that holds a special byte is searched word by word (docs/performance.md,
// "Go on wasm"; BenchmarkWriteStrings32K, FuzzWriteString).
func decodeRun(d []byte, i int, dst []byte, n int) (int, int) {
	for n+decodeRoom <= len(dst) && i+64 <= len(d) {
		w := d[i : i+64 : i+64]
		o := dst[n : n+64 : n+64]
		x := le.Uint64(w, 0)
		store64(o, 0, x)
		acc := special(x)
		x = le.Uint64(w, 8)
		store64(o, 8, x)
		acc |= special(x)
		x = le.Uint64(w, 16)
		store64(o, 16, x)
		acc |= special(x)
		x = le.Uint64(w, 24)
		store64(o, 24, x)
		acc |= special(x)
		x = le.Uint64(w, 32)
		store64(o, 32, x)
		acc |= special(x)
		x = le.Uint64(w, 40)
		store64(o, 40, x)
		acc |= special(x)
		x = le.Uint64(w, 48)
		store64(o, 48, x)
		acc |= special(x)
		x = le.Uint64(w, 56)
		store64(o, 56, x)
		acc |= special(x)
		if acc&msb == 0 {
			i += 64
			n += 64
			continue
		}
		// The ORed tests say only that some word hit (special's lowest
		// bit is exact within a word, not across them): find the first.
		// Unrolled: a loop pays a back-edge per word.
		t := 0
		m := special(le.Uint64(w, 0)) & msb
		if m == 0 {
			t = 8
			m = special(le.Uint64(w, 8)) & msb
			if m == 0 {
				t = 16
				m = special(le.Uint64(w, 16)) & msb
				if m == 0 {
					t = 24
					m = special(le.Uint64(w, 24)) & msb
					if m == 0 {
						t = 32
						m = special(le.Uint64(w, 32)) & msb
						if m == 0 {
							t = 40
							m = special(le.Uint64(w, 40)) & msb
							if m == 0 {
								t = 48
								m = special(le.Uint64(w, 48)) & msb
								if m == 0 {
									t = 56
									m = special(le.Uint64(w, 56)) & msb
								}
							}
						}
					}
				}
			}
		}
		t += bits.TrailingZeros64(m) >> 3
		i += t
		n += t
		if w[t] != '\\' || i+1 >= len(d) {
			return i, n
		}
		b := escapeByte[d[i+1]]
		if b == 0 {
			return i, n
		}
		dst[n] = b
		n++
		i += 2
	}
	return i, n
}

// store64 writes x to d[i:i+8] little-endian (one store, as le.Uint64 is one load).
func store64(d []byte, i int, x uint64) {
	b := d[i : i+8]
	b[0], b[1], b[2], b[3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
	b[4], b[5], b[6], b[7] = byte(x>>32), byte(x>>40), byte(x>>48), byte(x>>56)
}

// writeTaped is WriteString for a string recorded on the replay tape: the
// escapes at the tape's offsets are decoded and the runs between them are
// copied, with no scan. contents start at i, the start entry is at e and
// the closing quote at end.
func (r *Reader) writeTaped(w Writer, scratch []byte, direct, i, e, end int) error {
	d := r.data
	var werr error
	n := 0
	run := i
	for j := e + 1; ; j++ {
		k := end
		if x := r.replay.ent[j]; x&tapeEnd == 0 {
			k = int(x & tapeOff)
		}
		if k < run || k > end {
			continue // the low half of a surrogate pair, decoded with its high half
		}
		// Flush the run d[run:k]: straight to w when long, else via scratch.
		if k-run >= direct || n+k-run+utf8.UTFMax > len(scratch) {
			if werr == nil && n > 0 {
				_, werr = w.Write(scratch[:n])
			}
			n = 0
			if k-run >= direct || k-run+utf8.UTFMax > len(scratch) {
				if werr == nil && k > run {
					_, werr = w.Write(d[run:k])
				}
				run = k
			}
		}
		n += copy(scratch[n:], d[run:k])
		if k == end {
			if werr == nil && n > 0 {
				_, werr = w.Write(scratch[:n])
			}
			r.replay.cur = j + 1
			r.done(end + 1)
			return werr
		}
		// The tape came from a validating pass, so d[k:] is a whole escape.
		if b := escapeByte[d[k+1]]; b != 0 {
			scratch[n] = b
			n++
			run = k + 2
			continue
		}
		u, adv, st := decodeU(d, k)
		if st != uOK && st != uEnd {
			r.fail(BadSyntax, k, whatUEscape) // not the tape's bytes
			return werr
		}
		n += utf8.EncodeRune(scratch[n:], u)
		run = k + adv
	}
}

// AppendString consumes the string value due next, as WriteString does,
// and appends its decoded text to dst, which it returns. Where WriteString
// hands w pieces of a scratch buffer, it decodes straight into dst's spare
// capacity (growing dst, an allocation, only when that is too small): a
// caller that must hold the text, such as a chat message's content read
// before its role, saves a copy and a call per piece. The text appended
// and the Reader's state afterwards, in prefix mode too, are WriteString's;
// on a syntax error what was appended is unspecified. A replay tape is not
// consulted.
func (r *Reader) AppendString(dst []byte) []byte {
	i, ok := r.opening('"', whatString)
	if !ok {
		return dst
	}
	dst, k, st := appendDecoded(dst, r.data, i+1, true)
	switch st {
	case decQuote:
		r.done(k + 1)
	case decCut:
		r.eof() // a cut run is kept whole, a cut escape is not
	case decControl:
		r.fail(BadSyntax, k, whatControl)
	case decEscape:
		r.fail(BadSyntax, k, whatEscape)
	case decUEscape:
		r.fail(BadSyntax, k, whatUEscape)
	}
	return dst
}

// DecodeString decodes the string contents starting at d[i], just after the
// opening quote, by the Reader's rules (WriteString's text), appending to
// dst's spare capacity without ever growing it. It returns the extended
// slice, the offset of the closing quote, and ok. It fails (ok false, the
// returned slice then unspecified beyond dst's length) when the contents
// are invalid, d ends inside them, or the text does not fit in dst's spare
// capacity less 76 bytes (the decoding window's room): the caller, a fast
// path reading a known shape by offsets, then declines and lets the Reader
// read the value and report any error. It keeps no tape.
func DecodeString(dst, d []byte, i int) ([]byte, int, bool) {
	dst, k, st := appendDecoded(dst, d, i, false)
	return dst, k, st == decQuote
}

// Where appendDecoded stopped: at the closing quote, at the end of the
// input (inside a run or an escape), at a control byte, a bad escape or a
// bad \u escape, or (not growing) out of room.
const (
	decQuote uint8 = iota
	decCut
	decControl
	decEscape
	decUEscape
	decFull
)

// appendDecoded decodes string contents from d[i] into dst's spare
// capacity, growing dst when grow is set and stopping with decFull when
// not, and returns dst, the offset where it stopped and why: AppendString
// and DecodeString, which differ only in what they do with those.
func appendDecoded(dst, d []byte, i int, grow bool) ([]byte, int, uint8) {
	for {
		if cap(dst)-len(dst) < decodeRoom+utf8.UTFMax {
			// Room for decodeRun's window, or for an escape.
			if !grow {
				return dst, i, decFull
			}
			dst = slices.Grow(dst, max(cap(dst), 2*decodeRoom))
		}
		full := dst[:cap(dst)]
		var n int
		i, n = decodeRun(d, i, full, len(dst))
		dst = full[:n]
		if n+decodeRoom > cap(dst) {
			if !grow {
				return dst, i, decFull
			}
			continue // out of room, not at a special byte
		}
		k := nextSpecial(d, i)
		if !grow && len(dst)+(k-i)+utf8.UTFMax > cap(dst) {
			return dst, i, decFull
		}
		dst = append(dst, d[i:k]...)
		if k >= len(d) {
			return dst, k, decCut
		}
		switch c := d[k]; {
		case c == '"':
			return dst, k, decQuote
		case c != '\\':
			return dst, k, decControl
		case k+1 >= len(d):
			return dst, k, decCut
		}
		if b := escapeByte[d[k+1]]; b != 0 {
			dst = append(dst, b)
			i = k + 2
			continue
		}
		if d[k+1] != 'u' {
			return dst, k, decEscape
		}
		u, adv, st := decodeU(d, k)
		switch {
		case st == uEOF || st == uEnd:
			return dst, k, decCut
		case st != uOK:
			return dst, k, decUEscape
		}
		dst = utf8.AppendRune(dst, u)
		i = k + adv
	}
}
