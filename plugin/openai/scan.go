package openai

import "bytes"

// MaxDepth is the deepest nesting of JSON arrays and objects a body may have.
// The scanner below is iterative, so depth costs no stack; the bound exists so
// that a request cannot make the plugin do unbounded bookkeeping, and 64 is
// far beyond the 4 levels an OpenAI request uses (body → messages → message →
// content part → image_url).
const MaxDepth = 64

// scanner validates a body as one JSON object without recursion and, for a
// body cut at the buffer limit, remembers where the last complete value ended
// so that repair can close the document.
//
// Checked: structure (brackets, commas, colons, key strings), string escapes
// (only the RFC 8259 §7 ones, \u with four hex digits), literals, nesting
// depth. Not checked, to keep the pass cheap and lenient like the servers'
// own parsers: number grammar beyond its character set (the fields we read are
// re-parsed strictly), raw control bytes and invalid UTF-8 inside strings
// (passed through byte-wise).
type scanner struct {
	stack [MaxDepth]byte // '{' or '[' per open container
	depth int

	// end is the offset just past the top-level object when complete.
	end      int
	complete bool

	// For truncated bodies: body[:safe] ends right after a complete value (or
	// an opening bracket) at nesting depth safeDepth, so appending the closers
	// for stack[:safeDepth] yields valid JSON.
	safe      int
	safeDepth int

	// When the body ends inside a string value (not a key), body[:strSafe]
	// ends on a character boundary of that string: no escape sequence and no
	// surrogate pair is cut. inValue reports that case.
	inValue bool
	strSafe int

	errOff int // offset of the first offending byte when the scan fails
}

// scan states.
const (
	stValue      = iota // a value must follow
	stValueOrEnd        // first array element or ']'
	stKeyOrEnd          // first object key or '}'
	stKey               // object key after ','
	stColon             // ':' after a key
	stCommaOrEnd        // ',' or the container's closer
	stDone              // top-level object closed
)

// scan returns nil when body is one JSON object (possibly followed by
// whitespace), errTruncatedBody when it is a valid prefix of one, and
// errSyntax or errDepth otherwise (s.errOff says where).
func (s *scanner) scan(body []byte) error {
	*s = scanner{}
	st := stValue
	i := 0
	n := len(body)
	for i < n {
		c := body[i]
		if c == ' ' || c == '\n' || c == '\r' || c == '\t' {
			i++
			continue
		}
		switch st {
		case stDone:
			s.errOff = i
			return errSyntax
		case stColon:
			if c != ':' {
				s.errOff = i
				return errSyntax
			}
			st = stValue
			i++
			continue
		case stKeyOrEnd, stKey:
			if c == '}' && st == stKeyOrEnd {
				st = s.pop(i + 1)
				i++
				continue
			}
			if c != '"' {
				s.errOff = i
				return errSyntax
			}
			j, err := s.scanString(body, i+1, false)
			if err != nil {
				return err
			}
			i = j
			st = stColon
			continue
		case stCommaOrEnd:
			top := s.stack[s.depth-1]
			switch {
			case c == ',' && top == '{':
				st = stKey
			case c == ',':
				st = stValue
			case c == '}' && top == '{', c == ']' && top == '[':
				st = s.pop(i + 1)
			default:
				s.errOff = i
				return errSyntax
			}
			i++
			continue
		case stValueOrEnd:
			if c == ']' {
				st = s.pop(i + 1)
				i++
				continue
			}
		}
		// A value starts at i.
		if s.depth == 0 && c != '{' {
			s.errOff = i // the top level must be an object
			return errSyntax
		}
		switch {
		case c == '{' || c == '[':
			if s.depth == MaxDepth {
				s.errOff = i
				return errDepth
			}
			s.stack[s.depth] = c
			s.depth++
			i++
			s.markSafe(i)
			if c == '{' {
				st = stKeyOrEnd
			} else {
				st = stValueOrEnd
			}
		case c == '"':
			j, err := s.scanString(body, i+1, true)
			if err != nil {
				return err
			}
			i = j
			s.markSafe(i)
			st = stCommaOrEnd
		default:
			j := i
			for j < n && isTokenByte(body[j]) {
				j++
			}
			if j == n {
				return errTruncatedBody // a number or literal may continue
			}
			if j == i || !validAtom(body[i:j]) {
				s.errOff = i
				return errSyntax
			}
			i = j
			s.markSafe(i)
			st = stCommaOrEnd
		}
	}
	if st == stDone {
		return nil
	}
	return errTruncatedBody
}

func (s *scanner) markSafe(off int) {
	s.safe = off
	s.safeDepth = s.depth
}

// pop closes the innermost container, whose closer ends at off, and returns
// the next state.
func (s *scanner) pop(off int) int {
	s.depth--
	if s.depth == 0 {
		s.end = off
		s.complete = true
		return stDone
	}
	s.markSafe(off)
	return stCommaOrEnd
}

// scanString scans the string whose first content byte is body[i] and returns
// the offset past its closing quote. When the body ends inside the string it
// records s.inValue/s.strSafe and returns errTruncatedBody.
func (s *scanner) scanString(body []byte, i int, value bool) (int, error) {
	n := len(body)
	start := i
	lastHigh := -1 // start of a \uD800-\uDBFF escape that ended at lastEnd
	lastEnd := -1
	q := -1 // offset of the next '"' at or after i; -1 when none is left
	if j := bytes.IndexByte(body[i:], '"'); j >= 0 {
		q = i + j
	}
	for {
		if q >= 0 && q < i { // the quote was escaped: find the next one
			q = -1
			if j := bytes.IndexByte(body[i:], '"'); j >= 0 {
				q = i + j
			}
		}
		// Look for an escape only before the quote, so that a long string
		// with many escapes stays linear.
		lim := n
		if q >= 0 {
			lim = q
		}
		b := bytes.IndexByte(body[i:lim], '\\')
		if b < 0 {
			if q >= 0 {
				return q + 1, nil
			}
			// No quote, no escape: the body ends in the string.
			s.truncatedIn(value, start, s.cutBefore(n, lastHigh, lastEnd))
			return 0, errTruncatedBody
		}
		k := i + b
		if k+1 >= n {
			s.truncatedIn(value, start, s.cutBefore(k, lastHigh, lastEnd))
			return 0, errTruncatedBody
		}
		switch body[k+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i = k + 2
			continue
		case 'u':
		default:
			s.errOff = k
			return 0, errSyntax
		}
		if k+6 > n {
			for j := k + 2; j < n; j++ {
				if hexVal(body[j]) < 0 {
					s.errOff = k
					return 0, errSyntax
				}
			}
			s.truncatedIn(value, start, s.cutBefore(k, lastHigh, lastEnd))
			return 0, errTruncatedBody
		}
		r := hex4(body[k+2 : k+6])
		if r < 0 {
			s.errOff = k
			return 0, errSyntax
		}
		i = k + 6
		if r >= 0xD800 && r <= 0xDBFF {
			lastHigh = k
		} else {
			lastHigh = -1
		}
		lastEnd = i
	}
}

// cutBefore returns where to cut a string value whose escape at k is
// incomplete: before it, or before the high surrogate it would complete.
func (s *scanner) cutBefore(k, lastHigh, lastEnd int) int {
	if lastHigh >= 0 && lastEnd == k {
		return lastHigh
	}
	return k
}

// truncatedIn records a body that ends inside a string starting at start. An
// empty partial value is treated like a cut before it (nothing of it was read).
func (s *scanner) truncatedIn(value bool, start, strSafe int) {
	if value && strSafe > start {
		s.inValue = true
		s.strSafe = strSafe
	}
}

// repair appends to dst a complete JSON document made of the longest usable
// prefix of body followed by closers, after a scan that returned
// errTruncatedBody. It returns the document and how many trailing bytes of it
// are synthetic (not from body).
func (s *scanner) repair(dst, body []byte) ([]byte, int) {
	dst = dst[:0]
	depth := s.safeDepth
	if s.inValue {
		dst = append(dst, body[:s.strSafe]...)
		dst = append(dst, '"')
		depth = s.depth
	} else {
		dst = append(dst, body[:s.safe]...)
	}
	real := len(dst)
	if s.inValue {
		real--
	}
	for d := depth - 1; d >= 0; d-- {
		if s.stack[d] == '{' {
			dst = append(dst, '}')
		} else {
			dst = append(dst, ']')
		}
	}
	return dst, len(dst) - real
}

// isTokenByte reports bytes that may appear in a JSON number or literal.
func isTokenByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '-' || c == '+' || c == '.' || c == 'E'
}

// validAtom accepts the literals and anything that starts like a number; the
// fields this package reads re-parse their numbers strictly.
func validAtom(b []byte) bool {
	switch b[0] {
	case 't':
		return string(b) == "true"
	case 'f':
		return string(b) == "false"
	case 'n':
		return string(b) == "null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		for _, c := range b {
			if c >= 'a' && c <= 'z' && c != 'e' {
				return false
			}
		}
		return true
	}
	return false
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
func hex4(b []byte) int {
	v := 0
	for _, c := range b {
		h := hexVal(c)
		if h < 0 {
			return -1
		}
		v = v<<4 | h
	}
	return v
}
