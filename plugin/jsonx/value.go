package jsonx

// SkipTo passes over the value due next, which the caller has read and
// validated itself by the Reader's rules and which ends at end (a fast path
// for a known shape, such as openai's chat messages, held to the Reader by
// fuzzing). Within an array the "value" may be a run of elements with their
// separating commas: the Reader counts none. It reports false, and does
// nothing, when no value is due or end is not past the read position and
// within the input. The value is not recorded on a tape.
func (r *Reader) SkipTo(end int) bool {
	if r.bad() || r.state != stValue || end <= r.pos || end > len(r.data) {
		return false
	}
	r.done(end)
	return true
}

// Skip validates and passes over the value due next.
func (r *Reader) Skip() { r.Value() }

// Value consumes the value due next, validating all of it, and returns it.
// It returns a zero Value (Kind None) when no value is due, on failure, and
// in prefix mode when the input ends before the value has a reliable head
// (an empty string head, a number or literal that may continue).
func (r *Reader) Value() Value {
	if r.bad() || r.state != stValue {
		return Value{}
	}
	d := r.data
	i := SkipSpace(d, r.pos)
	if i >= len(d) {
		r.eof()
		return Value{}
	}
	switch k := kindOf[d[i]]; k {
	case String:
		if r.replay != nil {
			if e, ok := r.replay.find(i + 1); ok {
				end, esc := r.replay.end(e)
				if end < len(d) && d[end] == '"' {
					r.done(end + 1)
					return Value{Kind: String, Raw: d[i+1 : end], Off: i, Escaped: esc}
				}
			}
		}
		// A short plain string is never on a tape (see Tape.close).
		if q := shortEnd(d, i+1); q >= 0 {
			r.done(q + 1)
			return Value{Kind: String, Raw: d[i+1 : q], Off: i}
		}
		end, esc, st := scanString(d, i+1, r.tape)
		if st == sOK {
			r.done(end)
			return Value{Kind: String, Raw: d[i+1 : end-1], Off: i, Escaped: esc}
		}
		r.failWith(stringWhat(st), end)
		if st == sEOF && r.prefix {
			if n := stringCut(d[i+1:]); n > 0 {
				return Value{Kind: String, Raw: d[i+1 : i+1+n], Off: i, Escaped: esc, Partial: true}
			}
		}
		return Value{}
	case Object, Array:
		var f skipFail
		if end := skipNested(d, i, r.depth, r.tape, &f); end >= 0 {
			r.done(end)
			return Value{Kind: k, Raw: d[i:end], Off: i}
		}
		r.failWith(f.what, f.at)
		if r.cut {
			return Value{Kind: k, Raw: d[i:f.at], Off: i, Partial: true}
		}
		return Value{}
	case Number:
		end, ok := scanNumber(d, i)
		if !ok {
			if end >= len(d) {
				r.eof()
			} else {
				r.fail(BadSyntax, i, whatNumber)
			}
			return Value{}
		}
		if end >= len(d) && r.prefix {
			r.eof() // the number may continue
			return Value{}
		}
		r.done(end)
		return Value{Kind: Number, Raw: d[i:end], Off: i}
	case Bool, Null:
		end, ok, eof := scanLiteral(d, i, literal(d[i]))
		if !ok {
			if eof {
				r.eof()
			} else {
				r.fail(BadSyntax, i, whatLiteral)
			}
			return Value{}
		}
		if end >= len(d) && r.prefix {
			r.eof() // dropped like a number, so a cut never changes a value
			return Value{}
		}
		r.done(end)
		return Value{Kind: k, Raw: d[i:end], Off: i}
	}
	r.failChar(i)
	return Value{}
}

// Valid reports whether data is one JSON document (with optional
// surrounding whitespace), by the rules in the package doc.
func Valid(data []byte) bool {
	var r Reader
	r.Reset(data)
	r.finish()
	return r.err.Code == 0
}
