package openai

import (
	"bytes"
	"encoding/binary"
	"io"

	"github.com/buger/jsonparser"
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

// unescapeChunk is how much of a JSON string is decoded at once; strings are
// decoded in pieces so the scratch buffer is fixed, whatever the body size.
const unescapeChunk = 2048

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

	// Set by WriteText. PromptChars is the number of bytes written to the
	// text writer, framing included: the input for a ~4 chars/token estimate.
	// PromptTokensExact counts the token ids of a token-id prompt (else 0).
	PromptChars       int
	PromptTokensExact int
}

// Parser extracts a Request from OpenAI request bodies without allocating in
// steady state. The zero value is ready to use. A Parser is not safe for
// concurrent use; keep one per HTTP context or per VM (the plugin is single
// threaded per VM).
type Parser struct {
	sc      scanner
	repairs []byte // truncated bodies are closed here; grows to the body limit once
	err     Error
	scratch [unescapeChunk + 16]byte
	model   [MaxModelBytes]byte
	one     [1]byte
	hexbuf  [18]byte

	// Located by Parse, consumed by WriteText.
	kind       Kind
	doc        []byte // body, or repairs when truncated
	synth      int    // trailing synthetic bytes of doc
	prompt     []byte
	promptType jsonparser.ValueType
	parsed     bool

	// Parse state.
	out                *Request
	first              *Error
	maxTok, maxCompTok int64
	hasMax, hasMaxComp bool

	// WriteText state.
	w      io.Writer
	n      int
	tokens int
	werr   error
	nth    int // element index inside the array being walked
	elem   jsonparser.ValueType

	// Message and part fields, recorded then written in a fixed order.
	role, content, toolCalls   []byte
	roleOK                     bool
	contentType, toolCallsType jsonparser.ValueType
	partType, partText         []byte
	partTypeOK                 bool
	partTextType               jsonparser.ValueType
	refusal                    []byte
	refusalType                jsonparser.ValueType
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

func (p *Parser) parse(kind Kind, body []byte, out *Request, truncOK bool) error {
	*out = Request{Kind: kind, N: 1}
	p.kind, p.doc, p.synth, p.prompt, p.promptType, p.parsed = kind, body, 0, nil, jsonparser.NotExist, false
	p.first, p.out = nil, out
	p.maxTok, p.maxCompTok, p.hasMax, p.hasMaxComp = 0, 0, false, false

	switch p.sc.scan(body) {
	case nil:
		p.doc = body[:p.sc.end]
	case errTruncatedBody:
		if !truncOK {
			return p.err.set(CodeTruncated, "", "", len(body), nil)
		}
		if p.sc.safeDepth == 0 && !p.sc.inValue { // not even "{" was read
			return p.err.set(CodeNotJSON, "", "", len(body), nil)
		}
		p.repairs, p.synth = p.sc.repair(p.repairs, body)
		p.doc = p.repairs
		out.Truncated = true
	case errDepth:
		return p.err.set(CodeTooDeep, "", "", p.sc.errOff, nil)
	default:
		return p.err.set(CodeNotJSON, "", "", p.sc.errOff, nil)
	}

	// The document is valid JSON now, so jsonparser's lenient walk cannot
	// disagree with the scanner about structure.
	if err := jsonparser.ObjectEach(p.doc, func(key, v []byte, vt jsonparser.ValueType, _ int) error {
		p.topField(key, v, vt)
		return nil
	}); err != nil {
		return p.err.set(CodeNotJSON, "", "", 0, nil)
	}
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
)

func (p *Parser) topField(key, v []byte, vt jsonparser.ValueType) {
	out := p.out
	switch string(key) {
	case FieldModel:
		switch {
		case vt == jsonparser.Null:
		case vt != jsonparser.String:
			p.fail(CodeBadField, FieldModel, ruleString, v)
		case p.partial(v): // a cut-off name would route to the wrong adapter
			out.Model = nil
		case len(v) > MaxModelBytes:
			p.fail(CodeBadField, FieldModel, ruleModelLen, v)
		default:
			m, err := jsonparser.Unescape(v, p.model[:])
			if err != nil {
				p.fail(CodeBadField, FieldModel, ruleString, v)
				return
			}
			out.Model = m
		}
	case FieldMaxTokens:
		p.maxTok, p.hasMax = p.count(FieldMaxTokens, v, vt, 0)
	case FieldMaxCompletionTokens:
		p.maxCompTok, p.hasMaxComp = p.count(FieldMaxCompletionTokens, v, vt, 0)
	case FieldN:
		if n, ok := p.count(FieldN, v, vt, 1); ok {
			out.N = n
		}
	case FieldStream:
		out.Stream = p.boolean(FieldStream, v, vt)
	case FieldStreamOptions:
		switch vt {
		case jsonparser.Null:
		case jsonparser.Object:
			iv, it, _, err := jsonparser.Get(v, FieldIncludeUsage)
			if err == nil {
				out.IncludeUsage = p.boolean(FieldIncludeUsage, iv, it)
			}
		default:
			p.fail(CodeBadField, FieldStreamOptions, ruleObject, v)
		}
	case FieldPrompt:
		if p.kind == Completion {
			p.prompt, p.promptType = v, vt
		}
	case FieldMessages:
		if p.kind == Chat {
			p.prompt, p.promptType = v, vt
		}
	}
}

// count parses a non-negative integer field (>= min), null meaning absent.
func (p *Parser) count(field string, v []byte, vt jsonparser.ValueType, min int64) (int64, bool) {
	if vt == jsonparser.Null {
		return 0, false
	}
	rule := ruleCount
	if min > 0 {
		rule = ruleN
	}
	if vt != jsonparser.Number {
		p.fail(CodeBadField, field, rule, v)
		return 0, false
	}
	n, err := jsonparser.ParseInt(v)
	if err != nil || n < min {
		p.fail(CodeBadField, field, rule, v)
		return 0, false
	}
	return n, true
}

func (p *Parser) boolean(field string, v []byte, vt jsonparser.ValueType) bool {
	switch vt {
	case jsonparser.Null:
		return false
	case jsonparser.Boolean:
		return v[0] == 't'
	}
	p.fail(CodeBadField, field, ruleBool, v)
	return false
}

// partial reports whether string value v is the head of a string the body
// was cut in. Relies on v aliasing p.doc: the repaired document ends with the
// synthetic quote and closers, and v's last byte sits right before them.
func (p *Parser) partial(v []byte) bool {
	if !p.sc.inValue || p.synth == 0 || len(v) == 0 {
		return false
	}
	return &v[len(v)-1] == &p.doc[len(p.doc)-p.synth-1]
}

// syntheticTail returns how many trailing bytes of v (which aliases p.doc)
// were added by repair rather than read from the body.
func (p *Parser) syntheticTail(v []byte) int {
	if p.synth == 0 || len(v) == 0 {
		return 0
	}
	last := &v[len(v)-1]
	for t := 0; t < p.synth; t++ {
		if last == &p.doc[len(p.doc)-1-t] {
			return min(p.synth-t, len(v))
		}
	}
	return 0
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
// surrogates to U+FFFD as jsonparser does); invalid UTF-8 passes through.
// Errors: ErrBadField for a prompt of the wrong shape (what was written
// before stays written), or the writer's own error. Calling WriteText before
// a successful (or field-error) Parse writes nothing.
func (p *Parser) WriteText(w io.Writer, out *Request) error {
	p.w, p.n, p.tokens, p.werr, p.first = w, 0, 0, nil, nil
	if p.parsed && p.prompt != nil {
		switch p.kind {
		case Completion:
			p.writePrompt()
		case Chat:
			p.writeMessages()
		}
	}
	out.PromptChars, out.PromptTokensExact = p.n, p.tokens
	p.w = nil
	if p.werr != nil {
		return p.werr
	}
	if p.first != nil {
		return p.first
	}
	return nil
}

func (p *Parser) ok() bool { return p.werr == nil && p.first == nil }

func (p *Parser) emit(b []byte) {
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

// emitString decodes raw JSON string content in bounded chunks.
func (p *Parser) emitString(raw []byte) {
	for len(raw) > 0 && p.werr == nil {
		k := len(raw)
		if k > unescapeChunk {
			k = escapeCut(raw, unescapeChunk)
		}
		dec, err := jsonparser.Unescape(raw[:k], p.scratch[:])
		if err != nil { // unreachable after scan; stay total anyway
			dec = raw[:k]
		}
		p.emit(dec)
		raw = raw[k:]
	}
}

// escapeCut returns the largest n <= lim that does not split an escape
// sequence or a \uD8xx\uDCxx surrogate pair of raw.
func escapeCut(raw []byte, lim int) int {
	i := 0
	for {
		j := bytes.IndexByte(raw[i:lim], '\\')
		if j < 0 {
			return lim
		}
		k := i + j
		l := 2
		if k+1 < len(raw) && raw[k+1] == 'u' {
			l = 6
			if k+12 <= len(raw) && raw[k+6] == '\\' && raw[k+7] == 'u' {
				hi, lo := hex4(raw[k+2:k+6]), hex4(raw[k+8:k+12])
				if hi >= 0xD800 && hi <= 0xDBFF && lo >= 0xDC00 && lo <= 0xDFFF {
					l = 12
				}
			}
		}
		if k+l > lim {
			if k == 0 { // cannot happen with lim >= 12; never return 0
				return min(l, len(raw))
			}
			return k
		}
		i = k + l
	}
}

func (p *Parser) writePrompt() {
	switch p.promptType {
	case jsonparser.Null:
	case jsonparser.String:
		p.emitString(p.prompt)
	case jsonparser.Array:
		p.nth, p.elem = 0, jsonparser.NotExist
		jsonparser.ArrayEachErr(p.prompt, func(v []byte, vt jsonparser.ValueType, _ int, _ error) error {
			p.promptElem(v, vt)
			if !p.ok() {
				return io.EOF
			}
			return nil
		})
	default:
		p.fail(CodeBadField, FieldPrompt, rulePrompt, p.prompt)
	}
}

var tokenSep = [4]byte{0xff, 0xff, 0xff, 0xff}

func (p *Parser) promptElem(v []byte, vt jsonparser.ValueType) {
	if p.nth == 0 {
		p.elem = vt
	} else if vt != p.elem {
		p.fail(CodeBadField, FieldPrompt, rulePrompt, v)
		return
	}
	i := p.nth
	p.nth++
	switch vt {
	case jsonparser.String:
		if i > 0 {
			p.emitByte(SepMessage)
		}
		p.emitString(v)
	case jsonparser.Number:
		p.emitToken(v)
	case jsonparser.Array:
		if i > 0 {
			p.emit(tokenSep[:])
		}
		jsonparser.ArrayEachErr(v, func(t []byte, tt jsonparser.ValueType, _ int, _ error) error {
			if tt != jsonparser.Number {
				p.fail(CodeBadField, FieldPrompt, rulePrompt, t)
			} else {
				p.emitToken(t)
			}
			if !p.ok() {
				return io.EOF
			}
			return nil
		})
	default:
		p.fail(CodeBadField, FieldPrompt, rulePrompt, v)
	}
}

func (p *Parser) emitToken(v []byte) {
	id, err := jsonparser.ParseInt(v)
	if err != nil || id < 0 || id > 0xffffffff {
		p.fail(CodeBadField, FieldPrompt, ruleTokenID, v)
		return
	}
	binary.LittleEndian.PutUint32(p.scratch[:4], uint32(id))
	p.emit(p.scratch[:4])
	p.tokens++
}

func (p *Parser) writeMessages() {
	if p.promptType == jsonparser.Null {
		return
	}
	if p.promptType != jsonparser.Array {
		p.fail(CodeBadField, FieldMessages, ruleMessages, p.prompt)
		return
	}
	jsonparser.ArrayEachErr(p.prompt, func(v []byte, vt jsonparser.ValueType, _ int, _ error) error {
		if vt != jsonparser.Object {
			p.fail(CodeBadField, FieldMessages, ruleMessages, v)
		} else {
			p.message(v)
		}
		if !p.ok() {
			return io.EOF
		}
		return nil
	})
}

func (p *Parser) message(v []byte) {
	p.role, p.roleOK, p.content, p.contentType, p.toolCalls, p.toolCallsType = nil, false, nil, jsonparser.NotExist, nil, jsonparser.NotExist
	jsonparser.ObjectEach(v, func(key, fv []byte, ft jsonparser.ValueType, _ int) error {
		switch string(key) {
		case FieldRole:
			switch ft {
			case jsonparser.String:
				p.role, p.roleOK = fv, true
			case jsonparser.Null:
				p.role, p.roleOK = nil, false
			default:
				p.fail(CodeBadField, FieldRole, ruleString, fv)
			}
		case FieldContent:
			p.content, p.contentType = fv, ft
		case FieldToolCalls:
			p.toolCalls, p.toolCallsType = fv, ft
		}
		return nil
	})
	if !p.ok() {
		return
	}
	if p.roleOK && p.partial(p.role) || !p.roleOK && p.syntheticTail(v) > 0 {
		// Cut inside the role, or before a role that may still follow:
		// nothing of this message is a reliable prefix.
		return
	}
	// Copy what the nested walks below overwrite.
	content, contentType, toolCalls, toolCallsType := p.content, p.contentType, p.toolCalls, p.toolCallsType
	p.emitString(p.role)
	p.emitByte(SepRole)
	switch contentType {
	case jsonparser.NotExist, jsonparser.Null:
	case jsonparser.String:
		p.emitString(content)
	case jsonparser.Array:
		p.nth = 0
		jsonparser.ArrayEachErr(content, func(pv []byte, pt jsonparser.ValueType, _ int, _ error) error {
			if pt != jsonparser.Object {
				p.fail(CodeBadField, FieldContent, rulePart, pv)
			} else {
				p.part(pv)
			}
			if !p.ok() {
				return io.EOF
			}
			return nil
		})
	default:
		p.fail(CodeBadField, FieldContent, ruleContent, content)
		return
	}
	if toolCallsType == jsonparser.Array || toolCallsType == jsonparser.Object {
		p.emitByte(SepToolCalls)
		p.emit(toolCalls[:len(toolCalls)-p.syntheticTail(toolCalls)])
	}
	if p.syntheticTail(v) == 0 {
		p.emitByte(SepMessage)
	}
}

func (p *Parser) part(v []byte) {
	p.partType, p.partTypeOK, p.partText, p.partTextType = nil, false, nil, jsonparser.NotExist
	p.refusal, p.refusalType = nil, jsonparser.NotExist
	jsonparser.ObjectEach(v, func(key, fv []byte, ft jsonparser.ValueType, _ int) error {
		switch string(key) {
		case FieldType:
			if ft == jsonparser.String {
				p.partType, p.partTypeOK = fv, true
			}
		case FieldText:
			p.partText, p.partTextType = fv, ft
		case FieldRefusal:
			p.refusal, p.refusalType = fv, ft
		}
		return nil
	})
	if p.partTypeOK && p.partial(p.partType) {
		return
	}
	switch string(p.partType) {
	case FieldRefusal:
		p.partText, p.partTextType = p.refusal, p.refusalType
		fallthrough
	case FieldText, "input_text", "output_text":
		if p.partTextType != jsonparser.String {
			if p.partTextType == jsonparser.NotExist || p.partTextType == jsonparser.Null {
				return // vLLM skips text parts without text
			}
			p.fail(CodeBadField, FieldText, ruleString, p.partText)
			return
		}
		if p.nth > 0 {
			p.emitByte(SepPart)
		}
		p.nth++
		p.emitString(p.partText)
	default:
		if p.syntheticTail(v) > 0 {
			return // a cut-off media part would hash to a value the full body never gives
		}
		if p.nth > 0 {
			p.emitByte(SepPart)
		}
		p.nth++
		p.emitByte(SepMedia)
		p.emitString(p.partType)
		h := fnv64(v)
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
