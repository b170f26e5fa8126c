package jsonx

import "strconv"

// MaxDepth is the deepest nesting of arrays and objects a document may have.
// The Reader keeps one bit per level in a uint64, and skipping a container
// recurses at most this deep; the bound stops a hostile body from making the
// plugin do unbounded work per byte or use unbounded stack, and is far
// beyond the 4 levels an OpenAI request uses.
const MaxDepth = 64

// maxKeyBytes is the Reader's buffer for decoded keys that contain escapes.
const maxKeyBytes = 128

// Kind is the type of a JSON value.
type Kind uint8

// Kinds. None means there is no value: the input ended (prefix mode), the
// Reader failed, or the call was made where no value is due.
const (
	None Kind = iota
	Object
	Array
	String
	Number
	Bool
	Null
)

// String returns the JSON name of the kind ("object", "boolean", ...).
func (k Kind) String() string {
	switch k {
	case Object:
		return "object"
	case Array:
		return "array"
	case String:
		return "string"
	case Number:
		return "number"
	case Bool:
		return "boolean"
	case Null:
		return "null"
	}
	return "none"
}

// kindOf classifies a value by its first byte.
var kindOf = [256]Kind{
	'{': Object, '[': Array, '"': String, 't': Bool, 'f': Bool, 'n': Null, '-': Number,
	'0': Number, '1': Number, '2': Number, '3': Number, '4': Number,
	'5': Number, '6': Number, '7': Number, '8': Number, '9': Number,
}

// Value is one JSON value located in the input. Raw aliases the input.
type Value struct {
	Kind Kind
	// Raw is the value's JSON text; for a String, the contents between the
	// quotes with escapes intact (decode with AppendUnescape).
	Raw []byte
	// Off is the offset of the value's first byte (a string's opening quote)
	// in the input given to Reset.
	Off int
	// Escaped reports that a String's Raw may contain escapes; when false,
	// Raw is already the decoded text.
	Escaped bool
	// Partial reports, in prefix mode, that the input ends inside this
	// value and Raw is its reliable head: a string up to its last whole
	// character, a container up to its last complete element.
	Partial bool
}

// Code classifies an Error.
type Code uint8

// Error codes.
const (
	BadSyntax     Code = iota + 1 // not JSON
	TooDeep                       // nesting deeper than MaxDepth
	UnexpectedEnd                 // the input ends inside the document (Reset, not ResetPrefix)
	WrongKind                     // Object, Array or WriteString called on a value of another kind
)

// Error is a read failure. The Reader keeps it inline, so failing costs no
// allocation; it is overwritten by the next Reset.
type Error struct {
	Code   Code
	Offset int    // byte offset in the input where reading failed
	What   string // what was wrong, e.g. "want ',' or '}'"
	Byte   byte   // the offending byte for "unexpected character"
}

// Detail returns what was wrong, with the offending character when there is
// one; Error adds the package and the offset.
func (e *Error) Detail() string {
	if e.What == whatChar {
		return whatChar + " " + strconv.QuoteRune(rune(e.Byte))
	}
	return e.What
}

// Error formats the failure; it allocates, so call it off the request path.
func (e *Error) Error() string {
	return "jsonx: " + e.Detail() + " at offset " + strconv.Itoa(e.Offset)
}

// Error texts.
const (
	whatChar      = "unexpected character"
	whatEnd       = "unexpected end of input"
	whatKey       = "want a string key"
	whatColon     = "want ':' after key"
	whatObjectSep = "want ',' or '}'"
	whatArraySep  = "want ',' or ']'"
	whatEscape    = "bad escape"
	whatUEscape   = `bad \u escape`
	whatControl   = "control character in string"
	whatNumber    = "bad number"
	whatLiteral   = "invalid literal"
	whatDeep      = "nesting deeper than 64"
	whatTrailing  = "trailing data after the value"
	whatObject    = "want an object"
	whatArray     = "want an array"
	whatString    = "want a string"
)

// Reader states.
const (
	stValue = iota // a value is due (at the top, or after Member/Elem returned true)
	stFirst        // just inside '{' or '['
	stNext         // after a member or element: ',' or the closer is due
	stDone         // the top-level value is complete
)

// Reader reads one JSON document without allocating. The zero value reads
// an empty input; call Reset or ResetPrefix first. A Reader is not safe for
// concurrent use. Once it fails, every call returns false, None or a zero
// Value, and Err reports the first failure.
type Reader struct {
	data    []byte
	pos     int
	depth   int
	objects uint64 // bit 0 is the innermost open container: 1 = object
	state   uint8
	prefix  bool
	cut     bool   // prefix mode: the input ended
	key     []byte // the current key when it aliases data
	keyLen  int    // else the length of the decoded key in keyBuf, or -1
	err     Error
	keyBuf  [maxKeyBytes]byte
	small   [16]byte // WriteString scratch when the caller's is too short
	tape    *Tape    // recording
	replay  *Tape
}

// RecordTape makes the Reader record on t where the escapes and the end of
// each string value of at least 64 bytes or with escapes are, as it
// validates them; nil stops recording. Reset stops it too.
func (r *Reader) RecordTape(t *Tape) { r.tape = t }

// UseTape makes the Reader trust what t recorded: Value and WriteString on a
// recorded string find its end and escapes there instead of scanning, so a
// second pass over a validated prompt only copies. t must have been
// recorded over the same bytes at the same offsets (ResetAt keeps them);
// nil stops using it, and so does Reset.
func (r *Reader) UseTape(t *Tape) { r.replay = t }

// Reset starts reading data, which must be one complete JSON document.
func (r *Reader) Reset(data []byte) { r.reset(data, false) }

// ResetPrefix starts reading data, which may be a JSON document cut short
// (see the package doc). A complete document reads exactly as with Reset.
func (r *Reader) ResetPrefix(data []byte) { r.reset(data, true) }

// ResetAt starts reading the one value at data[off:] (Reset rules); offsets,
// including Value.Off and error offsets, stay relative to data. It re-reads
// a value located by an earlier pass, such as a prompt found while
// validating a whole body.
func (r *Reader) ResetAt(data []byte, off int) {
	r.reset(data, false)
	r.pos = min(max(off, 0), len(data))
}

// ResetPrefixAt is ResetAt in prefix mode.
func (r *Reader) ResetPrefixAt(data []byte, off int) {
	r.reset(data, true)
	r.pos = min(max(off, 0), len(data))
}

func (r *Reader) reset(data []byte, prefix bool) {
	r.data, r.pos, r.depth, r.objects, r.state = data, 0, 0, 0, stValue
	r.prefix, r.cut, r.key, r.keyLen, r.err, r.tape, r.replay = prefix, false, nil, -1, Error{}, nil, nil
}

// Err returns the first failure as an *Error, or nil. In prefix mode the
// end of the input is not a failure; see Truncated.
func (r *Reader) Err() error {
	if r.err.Code != 0 {
		return &r.err
	}
	return nil
}

// Truncated reports, in prefix mode, that the input ended before the
// document did.
func (r *Reader) Truncated() bool { return r.cut }

// Offset returns the read position: after Member, Elem or Kind, the offset
// of the next value's first byte.
func (r *Reader) Offset() int { return r.pos }

// Depth returns the number of containers entered with Object or Array and
// not yet left.
func (r *Reader) Depth() int { return r.depth }

// Key returns the decoded key of the member Member stepped to. It aliases
// the input, or the Reader's buffer when the key has escapes. A key with
// escapes whose raw text is longer than 128 bytes is returned raw: an escape
// takes at most 6 bytes per decoded byte, so no escaped spelling of a key of
// up to 21 bytes is that long, and matching against such constants stays
// exact. Valid until the next Member.
func (r *Reader) Key() []byte {
	if r.keyLen >= 0 {
		return r.keyBuf[:r.keyLen]
	}
	return r.key
}

func (r *Reader) bad() bool { return r.err.Code != 0 || r.cut }

func (r *Reader) fail(code Code, off int, what string) {
	if r.err.Code == 0 {
		r.err = Error{Code: code, Offset: off, What: what}
	}
}

func (r *Reader) failChar(off int) {
	if r.err.Code == 0 {
		if off >= len(r.data) {
			r.eof()
			return
		}
		r.err = Error{Code: BadSyntax, Offset: off, What: whatChar, Byte: r.data[off]}
	}
}

// eof records that the input ended: a cut in prefix mode, else an error.
func (r *Reader) eof() {
	if r.prefix {
		r.cut = true
		r.pos = len(r.data)
		return
	}
	r.fail(UnexpectedEnd, len(r.data), whatEnd)
}

// failWith records the failure that what names at offset off: the end of
// the input (a cut in prefix mode), nesting too deep, an unexpected
// character, or another syntax error.
func (r *Reader) failWith(what string, off int) {
	switch what {
	case whatEnd:
		r.eof()
	case whatDeep:
		r.fail(TooDeep, off, what)
	case whatChar:
		r.failChar(off)
	default:
		r.fail(BadSyntax, off, what)
	}
}

// stringWhat names the failure of a string scan that ended with status st.
func stringWhat(st uint8) string {
	switch st {
	case sEOF:
		return whatEnd
	case sEscape:
		return whatEscape
	case sUEscape:
		return whatUEscape
	}
	return whatControl
}

// done moves past a value that ended at end.
func (r *Reader) done(end int) {
	r.pos = end
	if r.depth > 0 {
		r.state = stNext
	} else {
		r.state = stDone
	}
}

// leave moves past the closer of the innermost container, which ends at end.
func (r *Reader) leave(end int) {
	r.depth--
	r.objects >>= 1
	r.done(end)
}

// Kind returns the kind of the value due next without consuming it, or None
// (no value due, end of input, or a byte no value starts with; the latter
// fails on the next read).
func (r *Reader) Kind() Kind {
	if r.bad() || r.state != stValue {
		return None
	}
	i := SkipSpace(r.data, r.pos)
	r.pos = i
	if i >= len(r.data) {
		return None
	}
	return kindOf[r.data[i]]
}

// Object enters the object due next; iterate it with Member. It fails with
// WrongKind if the value is not an object.
func (r *Reader) Object() bool { return r.enter('{', 1, whatObject) }

// Array enters the array due next; iterate it with Elem. It fails with
// WrongKind if the value is not an array.
func (r *Reader) Array() bool { return r.enter('[', 0, whatArray) }

// opening returns the offset of the value due next when it starts with
// open; otherwise it records why (end of input, a byte no value starts
// with, a value of another kind, named what) and reports false.
func (r *Reader) opening(open byte, what string) (int, bool) {
	if r.bad() || r.state != stValue {
		return 0, false
	}
	d := r.data
	i := SkipSpace(d, r.pos)
	if i >= len(d) {
		r.eof()
		return 0, false
	}
	if d[i] != open {
		if kindOf[d[i]] == None {
			r.failChar(i)
		} else {
			r.fail(WrongKind, i, what)
		}
		return 0, false
	}
	return i, true
}

func (r *Reader) enter(open byte, bit uint64, what string) bool {
	i, ok := r.opening(open, what)
	if !ok {
		return false
	}
	if r.depth >= MaxDepth {
		r.fail(TooDeep, i, whatDeep)
		return false
	}
	r.depth++
	r.objects = r.objects<<1 | bit
	r.pos, r.state = i+1, stFirst
	return true
}

// next is the start of Member and Elem: skip the previous value if it was
// not read, check that the innermost container is the kind asked for (its
// bit in r.objects is 1 for an object), and find the next non-space byte.
func (r *Reader) next(objectBit uint64, what string) (int, bool) {
	if r.state == stValue && r.depth > 0 {
		r.Skip()
	}
	if r.bad() || r.depth == 0 {
		return 0, false
	}
	if r.objects&1 != objectBit {
		r.fail(WrongKind, r.pos, what)
		return 0, false
	}
	i := SkipSpace(r.data, r.pos)
	if i >= len(r.data) {
		r.eof()
		return 0, false
	}
	return i, true
}

// Member steps to the next member of the object entered last, skipping the
// previous member's value if it was not read. It returns false after the
// closing '}' (leaving the object), at the end of a prefix, or on failure.
// In prefix mode a member whose value has not begun is not returned.
func (r *Reader) Member() bool {
	i, ok := r.next(1, whatObject)
	if !ok {
		return false
	}
	d := r.data
	c := d[i]
	if c == '}' {
		r.leave(i + 1)
		return false
	}
	if r.state == stNext {
		if c != ',' {
			r.fail(BadSyntax, i, whatObjectSep)
			return false
		}
		if i = SkipSpace(d, i+1); i >= len(d) {
			r.eof()
			return false
		}
		c = d[i]
	}
	if c != '"' {
		r.fail(BadSyntax, i, whatKey)
		return false
	}
	end, esc, st := 0, false, uint8(sOK)
	if q := shortEnd(d, i+1); q >= 0 {
		end = q + 1
	} else if end, esc, st = scanString(d, i+1, nil); st != sOK {
		r.failWith(stringWhat(st), end)
		return false
	}
	r.key, r.keyLen = d[i+1:end-1], -1
	if esc {
		// Storing a slice of r.keyBuf in r would make every Reader escape
		// to the heap, so the decoded key is kept as a length.
		if k, ok := unescapeInto(r.keyBuf[:], r.key); ok {
			r.keyLen = len(k)
		}
	}
	if i = SkipSpace(d, end); i >= len(d) {
		r.eof()
		return false
	}
	if d[i] != ':' {
		r.fail(BadSyntax, i, whatColon)
		return false
	}
	if i = SkipSpace(d, i+1); i >= len(d) {
		r.eof()
		return false
	}
	r.pos, r.state = i, stValue
	return true
}

// Elem steps to the next element of the array entered last, skipping the
// previous element if it was not read. It returns false after the closing
// ']' (leaving the array), at the end of a prefix, or on failure.
func (r *Reader) Elem() bool {
	i, ok := r.next(0, whatArray)
	if !ok {
		return false
	}
	d := r.data
	if r.state == stNext {
		switch d[i] {
		case ',':
			if i = SkipSpace(d, i+1); i >= len(d) {
				r.eof()
				return false
			}
		case ']':
			r.leave(i + 1)
			return false
		default:
			r.fail(BadSyntax, i, whatArraySep)
			return false
		}
	} else if d[i] == ']' {
		r.leave(i + 1)
		return false
	}
	r.pos, r.state = i, stValue
	return true
}

// Unwind finishes the value being read at container depth depth (Depth
// when it was due): it leaves, validating what is left unread, every
// container entered since, and skips the value itself if it was never
// consumed. A caller that stopped reading a value midway (it had the wrong
// shape) calls it to go on with the document.
func (r *Reader) Unwind(depth int) {
	for !r.bad() && r.depth > depth {
		if r.objects&1 == 1 {
			for r.Member() {
			}
		} else {
			for r.Elem() {
			}
		}
	}
	if !r.bad() && r.depth == depth && r.state == stValue {
		r.Skip()
	}
}

// End finishes the document: it passes over whatever the caller left unread
// (validating it), checks that only whitespace follows the top-level value,
// and returns Err. In prefix mode a cut is not an error.
func (r *Reader) End() error {
	r.finish()
	return r.Err()
}

func (r *Reader) finish() {
	for !r.bad() && r.state != stDone {
		switch {
		case r.depth == 0:
			r.Skip()
		case r.objects&1 == 1:
			for r.Member() {
			}
		default:
			for r.Elem() {
			}
		}
	}
	if r.bad() {
		return
	}
	if i := SkipSpace(r.data, r.pos); i < len(r.data) {
		r.fail(BadSyntax, i, whatTrailing)
	}
}
