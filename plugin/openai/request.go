package openai

import (
	"bytes"
	"io"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
)

// Kind is the OpenAI endpoint a body was sent to; it decides where the prompt is.
type Kind uint8

// Endpoints this package understands.
const (
	Completion Kind = iota + 1 // POST /v1/completions: "prompt"
	Chat                       // POST /v1/chat/completions: "messages"
)

// Wire names: request paths and body fields.
const (
	PathCompletions     = "/v1/completions"
	PathChatCompletions = "/v1/chat/completions"

	FieldModel               = "model"
	FieldMaxTokens           = "max_tokens"
	FieldMaxCompletionTokens = "max_completion_tokens"
	FieldStream              = "stream"
	FieldStreamOptions       = "stream_options"
	FieldIncludeUsage        = "include_usage"
	FieldN                   = "n"
	FieldPrompt              = "prompt"
	FieldMessages            = "messages"
	FieldRole                = "role"
	FieldContent             = "content"
	FieldToolCalls           = "tool_calls"
	FieldType                = "type"
	FieldText                = "text"
	FieldRefusal             = "refusal"
)

// Framing bytes written between the pieces of a chat prompt. They are ASCII
// separators (RS, US, GS, SUB) that do not occur in ordinary text, so the
// stream is unambiguous enough for prefix hashing: moving text between role and
// content, or between two messages, always changes the bytes.
const (
	SepRole      byte = 0x1e // after a message's role, before its content
	SepMessage   byte = 0x1f // after each complete message
	SepToolCalls byte = 0x1d // before an assistant message's raw tool_calls JSON
	SepMedia     byte = 0x1a // opens and closes a media placeholder
	SepPart      byte = '\n' // between content parts, as vLLM joins text parts
)

// MaxModelBytes bounds the decoded "model" value (Hugging Face ids are far shorter).
const MaxModelBytes = 256

// MaxDepth is the deepest nesting of JSON arrays and objects a body may have
// (jsonx.MaxDepth): far beyond the 4 levels an OpenAI request uses (body →
// messages → message → content part → image_url).
const MaxDepth = jsonx.MaxDepth

// tapeEntries bounds the Parser's tape: the escapes and ends of the
// prompt's long strings, recorded while Parse validates them so that
// WriteText copies instead of scanning again. 8192 entries cover a 32 KB
// chat body with a "\n" every 35 bytes four times over; beyond that the
// rest is scanned as usual.
const tapeEntries = 8192

// unescapeChunk is the scratch size for decoding JSON strings
// (jsonx.Reader.WriteString decodes into it and writes it out when full), so
// the scratch is fixed whatever the body size. Each write costs the prefix
// hasher a partial block copied in and out and two interface calls: under
// wazero, a 32 KB role-first chat body hashed in 22.7-22.9 µs with 8 KB
// against 24.3-24.7 with 2 KB.
const unescapeChunk = 8192

// outBytes is the size of the Parser's output buffer: the prompt's small
// pieces (roles, separators, short contents) are gathered there and reach
// the writer in few large writes. Each write costs the prefix hasher a
// partial block copied in and out and two interface calls: under wazero,
// 75 messages of ~420 bytes took 139 µs into the hasher in 300 writes
// against 110 µs into a counting writer.
const outBytes = 8192

// Request is what the router reads from an OpenAI request body.
type Request struct {
	Kind Kind

	// Model is the decoded "model" value. It aliases the body (or the
	// Parser's buffers): valid until the body buffer is reused or the Parser
	// parses again.
	Model []byte

	// MaxTokens is the output bound: "max_completion_tokens" when present,
	// else "max_tokens". HasMaxTokens is false when neither is given (or both
	// are null), meaning the server's default (context length) applies.
	MaxTokens    int64
	HasMaxTokens bool

	Stream       bool  // "stream": the response is server-sent events
	IncludeUsage bool  // "stream_options.include_usage": the last event carries usage
	N            int64 // "n": choices generated per prompt, 1 when absent

	// Truncated reports that the body was cut at the buffer limit and only
	// its complete prefix was read (ParseTruncated).
	Truncated bool

	// Set by WriteText (or ParseText). PromptChars is the number of bytes
	// written to the text writer, framing included: the input for a ~4
	// chars/token estimate. PromptTokensExact counts the token ids of a
	// token-id prompt (else 0). PromptBad reports a prompt of the wrong
	// shape: the text written is the head before the bad part.
	PromptChars       int
	PromptTokensExact int
	PromptBad         bool
}

// Parser extracts a Request from OpenAI request bodies without allocating in
// steady state. The zero value is ready to use. A Parser is not safe for
// concurrent use; keep one per HTTP context or per VM (the plugin is single
// threaded per VM).
type Parser struct {
	rd, sub, sub2 jsonx.Reader // sub and sub2 re-read deferred values
	tape          jsonx.Tape
	tapeBuf       [tapeEntries]uint32
	err           Error
	scratch       [unescapeChunk]byte
	model         [MaxModelBytes]byte
	one           [1]byte
	hexbuf        [18]byte
	sink          sink
	pending       [outBytes]byte // output not yet written, see emit
	pendingLen    int
	// held is a message's content read before its role, decoded by
	// jsonx.Reader.AppendString; it grows (doubling) to the longest such
	// content seen and is reused.
	held []byte
	// slow turns fastMessages off, so that tests can hold it to message.
	slow bool
	// match is the memo's last answer in this parse (remembered).
	match memoMatched

	// Located by Parse, consumed by WriteText.
	kind       Kind
	doc        []byte // the body
	prefix     bool   // doc may be cut (ParseTruncated)
	promptOff  int    // offset of the prompt value in doc
	promptKind jsonx.Kind
	parsed     bool

	// Parse state.
	out                *Request
	first              *Error
	maxTok, maxCompTok int64
	hasMax, hasMaxComp bool

	// WriteText state (also ParseText's, which writes while parsing).
	w        io.Writer
	memo     Memo // w, when it remembers long strings
	n        int
	tokens   int
	werr     error
	stop     bool // the prompt had the wrong shape: write no more of it
	streamed bool // ParseText wrote a prompt already
}

// Memo is a text writer that remembers what long strings' text did to it,
// so that ParseText and WriteText can pass over a string they met before
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

// sink lets jsonx write decoded text through Parser.emit without an
// allocation (a pointer to a field converts to an interface for free).
type sink struct{ p *Parser }

func (s *sink) Write(b []byte) (int, error) {
	s.p.emit(b)
	return len(b), s.p.werr
}

// KindFromPath maps a request path (query string allowed) to its Kind.
func KindFromPath(path []byte) (Kind, bool) {
	if i := bytes.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	switch string(path) {
	case PathCompletions:
		return Completion, true
	case PathChatCompletions:
		return Chat, true
	}
	return 0, false
}

// Parse reads the fields of a complete body into out and locates its prompt
// for WriteText; it writes no prompt text, so the caller can seed the prefix
// hasher with the model first (clients put "model" anywhere, the OpenAI Python
// SDK after "messages").
//
// Errors are *Error values (see Code). ErrNotJSON, ErrTooDeep and
// ErrTruncated leave out zeroed except Kind. For ErrNoModel and ErrBadField
// every other field is still filled (the bad field reads as absent), so the
// caller may route on what is known or on load alone.
//
// Field rules: "max_tokens" and "max_completion_tokens" must be JSON integers
// in [0, 2^63-1] or null (negative, fractional, exponent or overflowing values
// are ErrBadField; servers reject such requests too). "n" must be an integer
// >= 1 or null. "stream" and "stream_options.include_usage" must be booleans
// or null. Unknown fields are skipped unexamined except for syntax.
func (p *Parser) Parse(kind Kind, body []byte, out *Request) error {
	return p.parse(kind, body, out, false)
}

// ParseTruncated is Parse for a body cut at the buffer limit ("past the
// limit, route on what was read"). If body is complete it behaves like Parse.
// Otherwise the longest usable prefix is read: values complete before the cut,
// plus the readable head of a prompt string that the cut falls in (never a
// partial escape or half a surrogate pair). A number or literal at the cut is
// dropped (it may continue), a cut-off "model" reads as absent (ErrNoModel),
// and out.Truncated is set. WriteText then writes a prefix of what the full
// body would have produced: the separator that closes the last, unfinished
// message is not written.
func (p *Parser) ParseTruncated(kind Kind, body []byte, out *Request) error {
	return p.parse(kind, body, out, true)
}

// ParseText is Parse (truncated false) or ParseTruncated (true) and
// WriteText in one pass: the prompt is decoded into w while it is
// validated, so the body is read once. The bytes written are those
// WriteText would write, and out.PromptChars, PromptTokensExact and
// PromptBad are set. Because the prompt is written before the rest of the
// body is read, a caller that needs the model to interpret the text must
// defer that (prefix.Hasher.ResetDeferred, then SetSeed).
//
// Differences from Parse + WriteText: the errors come back together,
// syntax errors (CodeNotJSON, CodeTooDeep, CodeTruncated, for which the
// text written must be discarded: it may be the head of a body that is not
// JSON) first, then w's error, then the first field error, prompt shape
// errors included (see PromptBad). A body with the prompt field twice
// writes the first one and fails with CodeBadField on the second (JSON
// decoders keep the last; a duplicated prompt key is no client's output,
// and its text cannot be unwritten).
func (p *Parser) ParseText(kind Kind, body []byte, truncated bool, w io.Writer, out *Request) error {
	p.memo, _ = w.(Memo)
	p.w, p.n, p.tokens, p.werr, p.stop, p.streamed, p.pendingLen = w, 0, 0, nil, false, false, 0
	p.match = memoMatched{off: -1}
	p.sink.p = p
	err := p.parse(kind, body, out, truncated)
	out.PromptChars, out.PromptTokensExact = p.n, p.tokens
	p.w, p.memo = nil, nil
	if p.werr != nil && (err == nil || p.err.Code == CodeBadField || p.err.Code == CodeNoModel) {
		return p.werr
	}
	return err
}

// parse reads the body in one forward pass: fields are extracted while the
// reader validates, and the prompt is validated and located, not decoded
// (or, under ParseText, decoded into p.w).
func (p *Parser) parse(kind Kind, body []byte, out *Request, truncOK bool) error {
	*out = Request{Kind: kind, N: 1}
	p.kind, p.doc, p.prefix, p.promptOff, p.promptKind, p.parsed = kind, body, truncOK, 0, jsonx.None, false
	p.first, p.out = nil, out
	p.maxTok, p.maxCompTok, p.hasMax, p.hasMaxComp = 0, 0, false, false

	r := &p.rd
	if truncOK {
		r.ResetPrefix(body)
	} else {
		r.Reset(body)
	}
	p.tape.Reset(p.tapeBuf[:])
	switch k := r.Kind(); {
	case k == jsonx.None && r.Offset() >= len(body): // empty or blank
		if truncOK {
			return p.err.set(CodeNotJSON, "", "", len(body), nil)
		}
		return p.err.set(CodeTruncated, "", "", len(body), nil)
	case k != jsonx.Object: // the top level must be an object
		return p.err.set(CodeNotJSON, "", "", r.Offset(), nil)
	}
	r.Object()
	for r.Member() {
		p.topField(r)
	}
	if err := r.End(); err != nil {
		*out = Request{Kind: kind, N: 1}
		p.n, p.tokens = 0, 0
		p.first = nil
		e := err.(*jsonx.Error)
		switch e.Code {
		case jsonx.TooDeep:
			return p.err.set(CodeTooDeep, "", "", e.Offset, nil)
		case jsonx.UnexpectedEnd:
			return p.err.set(CodeTruncated, "", "", len(body), nil)
		}
		return p.err.set(CodeNotJSON, "", "", e.Offset, nil)
	}
	out.Truncated = r.Truncated()
	p.parsed = true
	switch {
	case p.hasMaxComp:
		out.MaxTokens, out.HasMaxTokens = p.maxCompTok, true
	case p.hasMax:
		out.MaxTokens, out.HasMaxTokens = p.maxTok, true
	}
	if len(out.Model) == 0 && p.first == nil {
		p.first = p.err.set(CodeNoModel, FieldModel, "", -1, nil)
	}
	if p.first != nil {
		return p.first
	}
	return nil
}

// fail records the first field error; later ones are dropped.
func (p *Parser) fail(code Code, field, rule string, v []byte) {
	if p.first == nil {
		p.first = p.err.set(code, field, rule, -1, v)
	}
}

const (
	ruleString   = "a string or null"
	ruleBool     = "a boolean or null"
	ruleCount    = "an integer in [0, 9223372036854775807] or null"
	ruleN        = "an integer >= 1 or null"
	ruleObject   = "an object or null"
	rulePrompt   = "a string, an array of strings, an array of token ids or an array of token-id arrays"
	ruleTokenID  = "an integer in [0, 4294967295]"
	ruleMessages = "an array of message objects"
	ruleContent  = "a string, an array of content parts or null"
	rulePart     = "a content part object"
	ruleModelLen = "a string of at most 256 bytes"
	ruleOnce     = "given once"
)

func (p *Parser) topField(r *jsonx.Reader) {
	out := p.out
	switch string(r.Key()) {
	case FieldModel:
		v := r.Value()
		switch {
		case v.Kind == jsonx.None, v.Kind == jsonx.Null:
		case v.Kind != jsonx.String:
			p.fail(CodeBadField, FieldModel, ruleString, v.Raw)
		case v.Partial: // a cut-off name would route to the wrong adapter
			out.Model = nil
		case len(v.Raw) > MaxModelBytes:
			p.fail(CodeBadField, FieldModel, ruleModelLen, v.Raw)
		default:
			out.Model = jsonx.AppendUnescape(p.model[:0], v.Raw)
		}
	case FieldMaxTokens:
		p.maxTok, p.hasMax = p.count(FieldMaxTokens, r.Value(), 0)
	case FieldMaxCompletionTokens:
		p.maxCompTok, p.hasMaxComp = p.count(FieldMaxCompletionTokens, r.Value(), 0)
	case FieldN:
		if n, ok := p.count(FieldN, r.Value(), 1); ok {
			out.N = n
		}
	case FieldStream:
		out.Stream = p.boolean(FieldStream, r.Value())
	case FieldStreamOptions:
		switch r.Kind() {
		case jsonx.None, jsonx.Null:
			r.Skip()
		case jsonx.Object:
			r.Object()
			for r.Member() {
				if string(r.Key()) == FieldIncludeUsage {
					out.IncludeUsage = p.boolean(FieldIncludeUsage, r.Value())
				}
			}
		default:
			p.fail(CodeBadField, FieldStreamOptions, ruleObject, r.Value().Raw)
		}
	case FieldPrompt, FieldMessages:
		if string(r.Key()) == FieldPrompt && p.kind != Completion || string(r.Key()) == FieldMessages && p.kind != Chat {
			r.Skip()
			return
		}
		// Validated now, decoded by WriteText from its offset; the tape
		// spares WriteText a second scan of the prompt's strings. Under
		// ParseText it is decoded now, and the tape serves the few values
		// re-read out of order (content before role, content parts).
		p.tape.Reset(p.tapeBuf[:])
		r.RecordTape(&p.tape)
		if p.w == nil {
			v := r.Value()
			p.promptOff, p.promptKind = v.Off, v.Kind
		} else if p.streamed {
			field := FieldMessages
			if p.kind == Completion {
				field = FieldPrompt
			}
			p.fail(CodeBadField, field, ruleOnce, r.Value().Raw)
		} else {
			p.streamed = true
			depth := r.Depth()
			if p.kind == Completion {
				p.writePrompt(r)
			} else {
				p.writeMessages(r)
			}
			p.flush()
			r.Unwind(depth) // a shape error stops writing, not reading
			out.PromptBad = p.stop
		}
		r.RecordTape(nil)
	default:
		r.Skip()
	}
}

// count parses a non-negative integer field (>= min), null meaning absent.
func (p *Parser) count(field string, v jsonx.Value, min int64) (int64, bool) {
	if v.Kind == jsonx.Null || v.Kind == jsonx.None {
		return 0, false
	}
	rule := ruleCount
	if min > 0 {
		rule = ruleN
	}
	if v.Kind != jsonx.Number {
		p.fail(CodeBadField, field, rule, v.Raw)
		return 0, false
	}
	n, ok := jsonx.ParseInt(v.Raw)
	if !ok || n < min {
		p.fail(CodeBadField, field, rule, v.Raw)
		return 0, false
	}
	return n, true
}

func (p *Parser) boolean(field string, v jsonx.Value) bool {
	switch v.Kind {
	case jsonx.None, jsonx.Null:
		return false
	case jsonx.Bool:
		return v.Raw[0] == 't'
	}
	p.fail(CodeBadField, field, ruleBool, v.Raw)
	return false
}

// WriteText streams the prompt located by the last Parse into w and sets
// out.PromptChars (bytes w accepted) and out.PromptTokensExact. Equal prompts
// give equal byte streams; the framing is:
//
//	completions, string:            the decoded string
//	completions, array of strings:  the strings, SepMessage between them
//	                                (["a"] and "a" write the same bytes)
//	completions, token ids [1,2]:   each id as 4 bytes little-endian uint32;
//	                                arrays of arrays put 4 bytes 0xff between
//	                                prompts. Fixed width keeps 4 bytes per
//	                                token, so character blocks sized for ~4
//	                                chars/token hold whole tokens, and decimal
//	                                text would waste the hasher's block budget.
//	chat, per message in order:     role SepRole content [SepToolCalls raw
//	                                tool_calls JSON] SepMessage
//	content parts:                  joined with SepPart; text, input_text and
//	                                output_text parts write "text", refusal
//	                                parts "refusal"; any other part (image,
//	                                audio, file, ...) writes SepMedia type ':'
//	                                16 hex digits of FNV-1a 64 over the part's
//	                                raw JSON SepMedia: stable, data-sensitive,
//	                                without the data.
//
// JSON escapes are decoded (\uXXXX surrogate pairs to UTF-8, lone
// surrogates to U+FFFD as encoding/json does); invalid UTF-8 passes through.
// Errors: ErrBadField for a prompt of the wrong shape (what was written
// before stays written), or the writer's own error. Calling WriteText before
// a successful (or field-error) Parse writes nothing.
func (p *Parser) WriteText(w io.Writer, out *Request) error {
	p.memo, _ = w.(Memo)
	p.w, p.n, p.tokens, p.werr, p.first, p.stop, p.pendingLen = w, 0, 0, nil, nil, false, 0
	p.match = memoMatched{off: -1}
	p.sink.p = p
	if p.parsed && p.promptKind != jsonx.None {
		r := p.at(&p.rd, p.promptOff)
		switch p.kind {
		case Completion:
			p.writePrompt(r)
		case Chat:
			p.writeMessages(r)
		}
		p.flush()
	}
	out.PromptChars, out.PromptTokensExact, out.PromptBad = p.n, p.tokens, p.stop
	p.w, p.memo = nil, nil
	if p.werr != nil {
		return p.werr
	}
	if p.first != nil {
		return p.first
	}
	return nil
}

// at points r at the value starting at off in the body, in the mode Parse
// used, so a cut value reads exactly as it did then.
func (p *Parser) at(r *jsonx.Reader, off int) *jsonx.Reader {
	if p.prefix {
		r.ResetPrefixAt(p.doc, off)
	} else {
		r.ResetAt(p.doc, off)
	}
	r.UseTape(&p.tape)
	return r
}

func (p *Parser) ok() bool { return p.werr == nil && !p.stop }

// failText records a prompt of the wrong shape and stops writing it.
func (p *Parser) failText(code Code, field, rule string, v []byte) {
	p.stop = true
	p.fail(code, field, rule, v)
}

// emit adds b to the output: copied into p.pending when it fits, else
// after flushing p.pending, straight to the writer when it is long. What the writer
// sees is the same byte stream in fewer pieces; flush ends it.
func (p *Parser) emit(b []byte) {
	if len(b) <= outBytes-p.pendingLen {
		p.pendingLen += copy(p.pending[p.pendingLen:], b)
		return
	}
	p.flush()
	if len(b) < outBytes/2 {
		p.pendingLen = copy(p.pending[:], b)
		return
	}
	p.write(b)
}

// flush writes the pending output.
func (p *Parser) flush() {
	if p.pendingLen > 0 {
		n := p.pendingLen
		p.pendingLen = 0
		p.write(p.pending[:n])
	}
}

func (p *Parser) write(b []byte) {
	if p.werr != nil || len(b) == 0 {
		return
	}
	n, err := p.w.Write(b)
	if n < 0 || n > len(b) {
		n = 0
	}
	p.n += n
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	p.werr = err
}

func (p *Parser) emitByte(c byte) {
	p.one[0] = c
	p.emit(p.one[:])
}

// emitString decodes the string value due next in r, or has the writer
// replay it when it is long and the writer is a Memo.
func (p *Parser) emitString(r *jsonx.Reader) { p.emitText(r, 0) }

// emitText is emitString for a value memoMatch passed over with token (0:
// none), which stands for comparing it again.
func (p *Parser) emitText(r *jsonx.Reader, token uint64) {
	if p.memo == nil || !p.memoString(r, token) {
		r.WriteString(&p.sink, p.scratch[:])
	}
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
// answer instead of comparing the text again (2.3 µs for 32 KB under
// wazero).
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

func (p *Parser) writePrompt(r *jsonx.Reader) {
	switch r.Kind() {
	case jsonx.Null:
	case jsonx.String:
		p.emitString(r)
	case jsonx.Array:
		r.Array()
		elem := jsonx.None
		for i := 0; r.Elem() && p.ok(); i++ {
			vk := r.Kind()
			if vk == jsonx.None {
				break // cut
			}
			if i == 0 {
				elem = vk
			} else if vk != elem {
				p.failText(CodeBadField, FieldPrompt, rulePrompt, r.Value().Raw)
				return
			}
			switch vk {
			case jsonx.String:
				if i > 0 {
					p.emitByte(SepMessage)
				}
				p.emitString(r)
			case jsonx.Number:
				p.emitToken(r.Value())
			case jsonx.Array:
				if i > 0 {
					p.emit(tokenSep[:])
				}
				r.Array()
				for r.Elem() && p.ok() {
					t := r.Value()
					switch t.Kind {
					case jsonx.None:
					case jsonx.Number:
						p.emitToken(t)
					default:
						p.failText(CodeBadField, FieldPrompt, rulePrompt, t.Raw)
					}
				}
			default:
				p.failText(CodeBadField, FieldPrompt, rulePrompt, r.Value().Raw)
			}
		}
	default:
		if v := r.Value(); v.Kind != jsonx.None { // None: a number or literal cut at the end
			p.failText(CodeBadField, FieldPrompt, rulePrompt, v.Raw)
		}
	}
}

var tokenSep = [4]byte{0xff, 0xff, 0xff, 0xff}

func (p *Parser) emitToken(v jsonx.Value) {
	if v.Kind == jsonx.None {
		return // cut: the number may continue
	}
	id, ok := jsonx.ParseInt(v.Raw)
	if !ok || id < 0 || id > 0xffffffff {
		p.failText(CodeBadField, FieldPrompt, ruleTokenID, v.Raw)
		return
	}
	// Little-endian by hand: encoding/binary is kept out of the module.
	p.scratch[0], p.scratch[1], p.scratch[2], p.scratch[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
	p.emit(p.scratch[:4])
	p.tokens++
}

func (p *Parser) writeMessages(r *jsonx.Reader) {
	switch r.Kind() {
	case jsonx.Null:
		return
	case jsonx.Array:
	default:
		if v := r.Value(); v.Kind != jsonx.None { // None: a number or literal cut at the end
			p.failText(CodeBadField, FieldMessages, ruleMessages, v.Raw)
		}
		return
	}
	r.Array()
	for r.Elem() && p.ok() {
		if !p.slow && p.fastMessages(r) {
			continue
		}
		switch r.Kind() {
		case jsonx.None: // cut
		case jsonx.Object:
			p.message(r)
		default:
			p.failText(CodeBadField, FieldMessages, ruleMessages, r.Value().Raw)
		}
	}
}

// fastRoom is the output buffer space fastMessage decodes a message into;
// when less is free the buffer is flushed first. A longer message is
// declined (after decoding up to fastRoom bytes of it, wasted) and read by
// message, which streams it: under wazero the decline costs ~0.4 µs, against
// several µs of decoding for such a message.
const fastRoom = 2048

// fastMessages writes the run of chat messages starting with the one due
// next in r while they have the shapes clients send for plain turns, tool
// calls and tool results, and moves r past them: a "role" that is a string
// without escapes, members with keys without escapes, among them at most
// one "content" (a string or null, before the role or after it) and one
// "tool_calls", whitespace allowed between tokens. It writes what message
// writes for them, without the Reader's calls per member and value (about
// 1.3 µs per message under wazero, most of a short message's cost). It
// returns false, having written nothing, when the first message has
// another shape (no role, a content array, an escaped key or role, a
// repeated member, a message over fastRoom bytes, an error or a cut):
// message reads it.
func (p *Parser) fastMessages(r *jsonx.Reader) bool {
	d := p.doc
	i, end := r.Offset(), -1
	for p.werr == nil {
		if outBytes-p.pendingLen < fastRoom+64 {
			p.flush()
		}
		e := p.fastMessage(d, i)
		if e < 0 {
			break
		}
		end = e
		if i = skipWS(d, e); i >= len(d) || d[i] != ',' {
			break
		}
		if i = skipWS(d, i+1); i >= len(d) || d[i] != '{' {
			break
		}
	}
	return end >= 0 && r.SkipTo(end)
}

// fastMessage appends to p.pending the text of the message object at d[i]
// when it has fastMessages' shape and fits in fastRoom bytes, and returns
// the offset after its '}'; else -1, with p.pending unchanged. Other
// members' values are validated by skipValue (the SSE fast path's, held to
// the Reader by FuzzSSEFastPath), which declines nesting deeper than
// fastMaxDepth. A content before the role (encoding/json sorts a map's
// keys so) is decoded first and moved behind the role once it is read.
func (p *Parser) fastMessage(d []byte, i int) int {
	if i >= len(d) || d[i] != '{' {
		return -1
	}
	n0 := p.pendingLen
	buf := p.pending[:n0:min(n0+fastRoom, outBytes)]
	role, content, tools := false, false, false
	tc, tcEnd := 0, 0 // the raw tool_calls JSON, when an array or object
	e := i + 1
	for first := true; ; first = false {
		if i = skipWS(d, e); i >= len(d) {
			return -1
		}
		if d[i] == '}' {
			break
		}
		if !first {
			if d[i] != ',' {
				return -1
			}
			if i = skipWS(d, i+1); i >= len(d) {
				return -1
			}
		}
		if d[i] != '"' {
			return -1
		}
		q, esc := jsonx.StringEnd(d, i+1)
		if q < 0 || esc {
			return -1
		}
		key := d[i+1 : q]
		if i = skipWS(d, q+1); i >= len(d) || d[i] != ':' {
			return -1
		}
		if i = skipWS(d, i+1); i >= len(d) {
			return -1
		}
		switch string(key) {
		case FieldRole:
			if role || d[i] != '"' {
				return -1
			}
			role = true
			var esc bool
			if e, esc = jsonx.StringEnd(d, i+1); e < 0 || esc || e-i > 64 {
				return -1
			}
			// The role and SepRole go before whatever content was
			// decoded already.
			n := e - i
			if cap(buf)-len(buf) < n {
				return -1
			}
			buf = buf[:len(buf)+n]
			copy(buf[n0+n:], buf[n0:len(buf)-n])
			copy(buf[n0:], d[i+1:e])
			buf[n0+n-1] = SepRole
			e++
		case FieldContent:
			if content {
				return -1
			}
			content = true
			switch d[i] {
			case '"':
				// A remembered content before its role (a long system
				// prompt, in encoding/json's order) is message's to
				// replay: declined now, not after decoding fastRoom
				// bytes of it (~1 µs under wazero).
				if !role && p.remembered(i) {
					return -1
				}
				var ok bool
				if buf, e, ok = jsonx.DecodeString(buf, d, i+1); !ok {
					return -1
				}
				e++
			case 'n':
				e = literal(d, i, "null")
			default:
				return -1 // parts, or a wrong kind
			}
		case FieldToolCalls:
			if tools {
				return -1
			}
			tools = true
			e = skipValue(d, i, 0)
			if d[i] == '[' || d[i] == '{' {
				tc, tcEnd = i, e
			}
		default:
			e = skipValue(d, i, 0)
		}
		if e < 0 {
			return -1
		}
	}
	if !role {
		return -1
	}
	if tcEnd > tc {
		if cap(buf)-len(buf) < 2+tcEnd-tc {
			return -1
		}
		buf = append(buf, SepToolCalls)
		buf = append(buf, d[tc:tcEnd]...)
	}
	if len(buf) == cap(buf) {
		return -1
	}
	p.pendingLen = len(append(buf, SepMessage))
	return i + 1
}

// message writes one chat message: role SepRole content [SepToolCalls
// tool_calls] SepMessage. Members come in any order; the role is written
// first, so content is streamed straight from the reader when the role has
// already been read (every SDK sends it first) and re-read from its offset
// otherwise.
func (p *Parser) message(r *jsonx.Reader) {
	var role, content, toolCalls jsonx.Value
	// A content read before the role is held: decoded into p.held (its
	// raw contents heldRaw, when read whole), or, when the writer
	// remembers it, passed over and replayed from heldAt with token.
	var heldRaw []byte
	heldAt, token := -1, uint64(0)
	roleOK, headDone, held := false, false, false
	r.Object()
	for r.Member() {
		switch string(r.Key()) {
		case FieldRole:
			v := r.Value()
			switch v.Kind {
			case jsonx.String:
				role, roleOK = v, true
			case jsonx.Null:
				role, roleOK = jsonx.Value{}, false
			case jsonx.None:
			default:
				p.failText(CodeBadField, FieldRole, ruleString, v.Raw)
			}
		case FieldContent:
			if roleOK && !role.Partial && !headDone && p.ok() && r.Kind() == jsonx.String {
				p.head(role)
				headDone = true
				p.emitString(r)
				content = jsonx.Value{}
				continue
			}
			if !headDone && p.ok() && r.Kind() == jsonx.String {
				// Content before role (encoding/json sorts map keys so;
				// SDKs send role first): a string the writer remembers is
				// passed over and replayed once the role is written;
				// another is decoded now, in this pass, and written then.
				held, content, heldRaw = true, jsonx.Value{}, nil
				var matched bool
				if heldAt, token, matched = p.memoMatch(r); matched {
					continue
				}
				from := r.Offset() + 1
				p.held = r.AppendString(p.held[:0])
				if to := r.Offset() - 1; !r.Truncated() && r.Err() == nil && to >= from && p.doc[to] == '"' {
					heldRaw = p.doc[from:to]
				}
				continue
			}
			held, content = false, r.Value()
		case FieldToolCalls:
			toolCalls = r.Value()
		default:
			r.Skip()
		}
	}
	if !p.ok() {
		return
	}
	cut := r.Truncated()
	if !headDone {
		if roleOK && role.Partial || !roleOK && cut {
			// Cut inside the role, or before a role that may still follow:
			// nothing of this message is a reliable prefix.
			return
		}
		p.head(role)
	}
	switch {
	case held && heldAt >= 0:
		p.emitText(p.at(&p.sub, heldAt), token)
	case held:
		p.emitHeld(heldRaw)
	}
	switch content.Kind {
	case jsonx.None, jsonx.Null:
	case jsonx.String:
		p.emitString(p.at(&p.sub, content.Off))
	case jsonx.Array:
		p.parts(p.at(&p.sub, content.Off))
	default:
		p.failText(CodeBadField, FieldContent, ruleContent, content.Raw)
		return
	}
	if toolCalls.Kind == jsonx.Array || toolCalls.Kind == jsonx.Object {
		p.emitByte(SepToolCalls)
		p.emit(toolCalls.Raw) // a cut value is its reliable head
	}
	if !cut {
		p.emitByte(SepMessage)
	}
}

// head writes a message's role and SepRole.
func (p *Parser) head(role jsonx.Value) {
	switch {
	case role.Kind != jsonx.String:
	case !role.Escaped && !role.Partial:
		// Already the decoded text: no re-read (under wazero a sub-reader
		// reset and WriteString cost ~280 ns per message).
		p.emit(role.Raw)
	default:
		p.emitString(p.at(&p.sub, role.Off))
	}
	p.emitByte(SepRole)
}

// parts writes an array of content parts, joined with SepPart.
func (p *Parser) parts(r *jsonx.Reader) {
	r.Array()
	nth := 0
	for r.Elem() && p.ok() {
		switch r.Kind() {
		case jsonx.None:
		case jsonx.Object:
			p.part(r, &nth)
		default:
			p.failText(CodeBadField, FieldContent, rulePart, r.Value().Raw)
		}
	}
}

func (p *Parser) part(r *jsonx.Reader, nth *int) {
	start := r.Offset()
	var typ, text, refusal jsonx.Value
	r.Object()
	for r.Member() {
		switch string(r.Key()) {
		case FieldType:
			if v := r.Value(); v.Kind == jsonx.String {
				typ = v
			}
		case FieldText:
			text = r.Value()
		case FieldRefusal:
			refusal = r.Value()
		default:
			r.Skip()
		}
	}
	if typ.Partial {
		return
	}
	switch string(typ.Raw) { // raw: an escaped spelling is not a text type
	case FieldRefusal:
		text = refusal
		fallthrough
	case FieldText, "input_text", "output_text":
		if text.Kind != jsonx.String {
			if text.Kind == jsonx.None || text.Kind == jsonx.Null {
				return // vLLM skips text parts without text
			}
			p.failText(CodeBadField, FieldText, ruleString, text.Raw)
			return
		}
		if *nth > 0 {
			p.emitByte(SepPart)
		}
		*nth++
		p.emitString(p.at(&p.sub2, text.Off))
	default:
		if r.Truncated() {
			return // a cut-off media part would hash to a value the full body never gives
		}
		if *nth > 0 {
			p.emitByte(SepPart)
		}
		*nth++
		p.emitByte(SepMedia)
		if typ.Kind == jsonx.String {
			p.emitString(p.at(&p.sub2, typ.Off))
		}
		h := fnv64(p.doc[start:r.Offset()])
		p.hexbuf[0] = ':'
		for i := 0; i < 16; i++ {
			p.hexbuf[1+i] = "0123456789abcdef"[(h>>(60-4*uint(i)))&0xf]
		}
		p.hexbuf[17] = SepMedia
		p.emit(p.hexbuf[:])
	}
}

// fnv64 is FNV-1a 64 (http://www.isthe.com/chongo/tech/comp/fnv/), inlined
// so that hashing a media part allocates nothing.
func fnv64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
