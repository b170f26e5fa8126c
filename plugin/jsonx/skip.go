package jsonx

// SkipSpace returns the offset of the first byte at or after d[i] that is
// not RFC 8259 whitespace, or len(d).
func SkipSpace(d []byte, i int) int {
	for i < len(d) {
		if c := d[i]; c != ' ' && c != '\n' && c != '\r' && c != '\t' {
			break
		}
		i++
	}
	return i
}

// SkipValue validates, by the Reader's rules, the value that starts at d[i]
// (no whitespace before it) inside depth open containers, and returns the
// offset just after it; -1 when it is not a valid value, d ends inside it,
// or it nests deeper than MaxDepth counting the depth open containers. It is
// for callers that read a known shape by offsets (openai's fast paths for
// chat messages and streamed events) and hand what it declines to a Reader,
// which says why. FuzzSkipValue holds it to the Reader.
func SkipValue(d []byte, i, depth int) int {
	var f skipFail
	return skipValue(d, i, depth, nil, &f)
}

// skipFail is why skipValue failed: what (one of the what texts) at
// offset at. When d ends inside the value, what is whatEnd and at the end
// of the value's reliable head: its last complete element or opening
// bracket, or the reliable head of a string the end falls in.
type skipFail struct {
	at   int
	what string
}

// literal returns the only literal a value starting with c can be.
func literal(c byte) string {
	switch c {
	case 't':
		return "true"
	case 'f':
		return "false"
	}
	return "null"
}

// skipValue validates the value at d[i], inside depth open containers,
// records its long and escaped strings on t unless t is nil, and returns
// the offset after it; or -1, having set f. Recursion is bounded by
// MaxDepth; each level is a loop over its members, which costs less than a
// jump per token through one function's dispatch on wasm (docs/performance.md,
// "Go on wasm"; BenchmarkSkip32K). f is written only on failure, and the
// innermost level sets it, so nothing is tracked per value.
func skipValue(d []byte, i, depth int, t *Tape, f *skipFail) int {
	if i >= len(d) {
		f.at, f.what = i, whatEnd
		return -1
	}
	switch c := d[i]; {
	case c == '"':
		if t == nil {
			if q, _ := StringEnd(d, i+1); q >= 0 {
				return q + 1
			}
		}
		return skipString(d, i, t, f, i)
	case c == '{' || c == '[':
		return skipNested(d, i, depth, t, f)
	}
	return skipScalar(d, i, f)
}

// skipScalar validates the number or literal at d[i] (any other byte is
// an unexpected character) and returns the offset after it, or -1 having
// set f.
func skipScalar(d []byte, i int, f *skipFail) int {
	switch c := d[i]; {
	case c == 't' || c == 'f' || c == 'n':
		end, ok, short := scanLiteral(d, i, literal(c))
		if !ok {
			f.at, f.what = i, whatLiteral
			if short {
				f.what = whatEnd
			}
			return -1
		}
		return end
	case kindOf[c] == Number:
		end, ok := scanNumber(d, i)
		if !ok {
			f.at, f.what = i, whatNumber
			if end >= len(d) {
				f.what = whatEnd
			}
			return -1
		}
		return end
	}
	f.at, f.what = i, whatChar
	return -1
}

// skipString validates the string value at d[i] with the Reader's scan,
// recording it on t, or says why it is invalid (its callers try StringEnd,
// inline, first when nothing records); safe is where a value cut inside it
// would end if none of it is reliable.
func skipString(d []byte, i int, t *Tape, f *skipFail, safe int) int {
	end, _, st := scanString(d, i+1, t)
	if st == sOK {
		return end
	}
	f.at, f.what = end, stringWhat(st)
	if st == sEOF {
		f.at = safe
		if n := stringCut(d[i+1:]); n > 0 {
			f.at = i + 1 + n // a cut string value ends the head mid-string
		}
	}
	return -1
}

// skipNested validates the object or array at d[i], as skipValue does.
func skipNested(d []byte, i, depth int, t *Tape, f *skipFail) int {
	if depth >= MaxDepth {
		f.at, f.what = i, whatDeep
		return -1
	}
	obj := d[i] == '{'
	closer, sep := byte(']'), whatArraySep
	if obj {
		closer, sep = '}', whatObjectSep
	}
	safe := i + 1 // the end of the last complete element, or the opening bracket
	if i = SkipSpace(d, i+1); i < len(d) && d[i] == closer {
		return i + 1
	}
	for {
		if i >= len(d) {
			f.at, f.what = safe, whatEnd
			return -1
		}
		if obj {
			if d[i] != '"' {
				f.at, f.what = i, whatKey
				return -1
			}
			q, _ := StringEnd(d, i+1)
			if q < 0 {
				// The reason, from the Reader's scan: a cut key keeps the head.
				end, _, st := scanString(d, i+1, nil)
				f.at, f.what = end, stringWhat(st)
				if st == sEOF {
					f.at = safe
				}
				return -1
			}
			if i = SkipSpace(d, q+1); i >= len(d) || d[i] != ':' {
				f.at, f.what = i, whatColon
				if i >= len(d) {
					f.at, f.what = safe, whatEnd
				}
				return -1
			}
			if i = SkipSpace(d, i+1); i >= len(d) {
				f.at, f.what = safe, whatEnd
				return -1
			}
		}
		var end int
		switch c := d[i]; {
		case c == '"':
			end = -1
			if t == nil {
				if q, _ := StringEnd(d, i+1); q >= 0 {
					end = q + 1
				}
			}
			if end < 0 {
				end = skipString(d, i, t, f, safe)
			}
		case c == '{' || c == '[':
			end = skipNested(d, i, depth+1, t, f)
		default:
			// A number at the end may continue, a literal cut there is
			// not one yet: the head ends before them.
			if end = skipScalar(d, i, f); end >= len(d) && kindOf[c] == Number {
				end, f.what = -1, whatEnd
			}
			if end < 0 && f.what == whatEnd {
				f.at = safe
			}
		}
		if end < 0 {
			return -1
		}
		safe = end
		if i = SkipSpace(d, end); i >= len(d) {
			f.at, f.what = safe, whatEnd
			return -1
		}
		if d[i] == closer {
			return i + 1
		}
		if d[i] != ',' {
			f.at, f.what = i, sep
			return -1
		}
		i = SkipSpace(d, i+1)
	}
}
