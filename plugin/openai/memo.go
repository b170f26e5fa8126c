package openai

import (
	"io"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
)

// Memo is a text writer that remembers what long strings' text did to it,
// so that ParseText can pass over a string they met before
// instead of decoding it again (the router's prefix hasher with a
// prefix.Memo: a shared system prompt is most of a long request).
// The parser offers every prompt string whose raw contents may be longer
// than MemoMinBytes: first to Recall, and if that declines, it writes the
// decoded text between Begin and End.
type Memo interface {
	io.Writer
	// MemoMinBytes is the length of the shortest raw string worth
	// offering; 0 when the writer remembers nothing.
	MemoMinBytes() int
	// Recall writes the text of the string whose raw (escaped) contents
	// rest begins with and end (its closing quote) follows, as remembered,
	// and returns the raw length and the characters written; or it writes
	// nothing and reports false. A token from Match for these very bytes
	// in this parse stands for comparing them again; 0 is none.
	Recall(rest []byte, end byte, token uint64) (rawLen, chars int, ok bool)
	// Match reports whether rest begins with the raw contents of a string
	// the writer remembers, followed by end, from whatever state, and
	// returns their length and a token for Recall; it writes nothing.
	Match(rest []byte, end byte) (rawLen int, token uint64, ok bool)
	// Begin tells the writer that a string's text is about to be written.
	Begin()
	// End tells the writer that the text of the string whose raw contents
	// are raw was written since Begin. It is not called for a string read
	// partly (a cut body) or on a write error.
	End(raw []byte)
}

// memoLong reports whether n raw bytes are worth offering to p.memo.
func (p *Parser) memoLong(n int) bool {
	m := p.memo.MemoMinBytes()
	return m > 0 && n > m
}

// memoMatch passes r over the string due next when p.memo remembers its
// raw contents, whatever the writer's state, and returns the offset of its
// opening quote and Match's token (message defers a content read before
// its role).
func (p *Parser) memoMatch(r *jsonx.Reader) (int, uint64, bool) {
	if p.memo == nil || r.Kind() != jsonx.String {
		return -1, 0, false
	}
	off := r.Offset()
	if !p.remembered(off) {
		return -1, 0, false
	}
	r.SkipTo(off + 1 + p.match.n + 1)
	return off, p.match.token, true
}

// remembered reports whether p.memo remembers the raw contents of the
// string whose opening quote is at p.doc[off], keeping Match's answer in
// p.match: fastMessage asks first, for a content before its role, and
// declines the message for message to replay it; memoMatch then takes the
// answer instead of comparing the text again (TestMemoMatchOnce).
func (p *Parser) remembered(off int) bool {
	if p.memo == nil {
		return false
	}
	if p.match.off != off {
		p.match = memoMatched{off: off, n: -1}
		if d := p.doc; p.memoLong(len(d) - off - 1) {
			if n, token, ok := p.memo.Match(d[off+1:], '"'); ok {
				p.match.n, p.match.token = n, token
			}
		}
	}
	return p.match.n >= 0
}

// memoMatched is a memo's answer for the string at off in this parse: its
// raw length (-1: not remembered) and Match's token.
type memoMatched struct {
	off, n int
	token  uint64
}

// emitHeld writes the content message decoded before its role; when its raw
// contents are known and long, between the memo's Begin and End.
func (p *Parser) emitHeld(raw []byte) {
	if p.memo == nil || raw == nil || !p.memoLong(len(raw)) {
		p.emit(p.held)
		return
	}
	p.flush()
	p.memo.Begin()
	p.emit(p.held)
	p.flush()
	if p.werr == nil {
		p.memo.End(raw)
	}
}

// memoString offers the string due next in r to p.memo when it may be long
// enough to be remembered: replayed, r is moved past it; else it is decoded
// between Begin and End, with the output flushed around it so that the
// writer sees exactly its text, and remembered when it was read whole. It
// reports false, having done nothing, for a string too short to offer.
func (p *Parser) memoString(r *jsonx.Reader, token uint64) bool {
	if r.Kind() != jsonx.String || p.werr != nil {
		return false
	}
	d, i := p.doc, r.Offset()+1 // the first content byte
	if !p.memoLong(len(d) - i) {
		return false
	}
	p.flush()
	if n, chars, ok := p.memo.Recall(d[i:], '"', token); ok {
		// Recall matched d[i:i+n] and its closing quote, so the value
		// is whole and valid: a remembered source was read whole.
		r.SkipTo(i + n + 1)
		p.n += chars
		return true
	}
	p.memo.Begin()
	r.WriteString(&p.sink, p.scratch[:])
	p.flush()
	if end := r.Offset(); p.werr == nil && r.Err() == nil && !r.Truncated() && end > i && d[end-1] == '"' {
		p.memo.End(d[i : end-1])
	}
	return true
}
