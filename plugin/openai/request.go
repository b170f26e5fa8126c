package openai

import (
	"bytes"
	"io"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
)

// Kind is the API endpoint a body was sent to; it decides where the prompt is.
type Kind uint8

// Endpoints this package understands.
const (
	Completion Kind = iota + 1 // POST /v1/completions: "prompt"
	Chat                       // POST /v1/chat/completions: "messages"
	Messages                   // POST /v1/messages (Anthropic Messages API): "system", "messages"
	Responses                  // POST /v1/responses (OpenAI Responses API): "instructions", "input"
)

// Wire names: request paths and body fields. The Messages API's are
// Anthropic's (as vLLM's vllm/entrypoints/anthropic/protocol.py implements
// them), the Responses API's OpenAI's (vllm/entrypoints/openai/responses).
const (
	PathCompletions     = "/v1/completions"
	PathChatCompletions = "/v1/chat/completions"
	PathMessages        = "/v1/messages"
	PathResponses       = "/v1/responses"

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

	FieldSystem             = "system"               // Messages: the system prompt
	FieldInstructions       = "instructions"         // Responses: the system prompt
	FieldInput              = "input"                // Responses: the prompt; Messages tool_use: its arguments
	FieldMaxOutputTokens    = "max_output_tokens"    // Responses: the output bound
	FieldPreviousResponseID = "previous_response_id" // Responses: the stored conversation continued
	FieldName               = "name"                 // a tool call's function
	FieldArguments          = "arguments"            // Responses function_call: its arguments
	FieldOutput             = "output"               // Responses function_call_output: the result
)

// Framing bytes written between the pieces of a chat prompt. They are ASCII
// separators (RS, US, GS, SUB) that do not occur in ordinary text, so the
// stream is unambiguous enough for prefix hashing: moving text between role and
// content, or between two messages, always changes the bytes.
const (
	SepRole      byte = 0x1e // after a message's role, before its content
	SepMessage   byte = 0x1f // after each complete message
	SepToolCalls byte = 0x1d // before a message's tool calls, and a tool block's parts
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
// prompt's long strings, recorded while they are validated so that a value
// read again out of order (a content before its role, a content part's
// text, a prompt written after its system prompt) is copied instead of
// scanned again. Past it the rest is scanned as usual.
const tapeEntries = 8192

// unescapeChunk is the scratch size for decoding JSON strings
// (jsonx.Reader.WriteString decodes into it and writes it out when full), so
// the scratch is fixed whatever the body size; each write costs the prefix
// hasher a partial block copied in and out, so fewer, larger writes are
// cheaper (BenchmarkParseTextRouter).
const unescapeChunk = 8192

// outBytes is the size of the Parser's output buffer: the prompt's small
// pieces (roles, separators, short contents) are gathered there and reach
// the writer in few large writes, for the same reason as unescapeChunk
// (BenchmarkParseTextMessages).
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

	Stream bool // "stream": the response is server-sent events
	// IncludeUsage reports that the stream will carry usage:
	// "stream_options.include_usage" for chat and completions; always for
	// a Messages or Responses stream (message_delta, response.completed).
	IncludeUsage bool
	N            int64 // "n": choices generated per prompt, 1 when absent

	// PreviousResponseID is FNV-1a 64 of the decoded
	// "previous_response_id" (Responses), HasPreviousResponse whether one
	// was given. Such a request continues a conversation stored by the
	// engine that answered it, which the router never saw: its prefix is
	// not in the body. vLLM keeps stored responses in the API server's
	// memory (VLLM_ENABLE_RESPONSES_API_STORE), so only that replica can
	// serve it; the router keys affinity on this value and learns it from
	// the response (StreamCounter.ResponseID, Reply.ResponseID).
	PreviousResponseID  uint64
	HasPreviousResponse bool

	// Truncated reports that the body was cut at the buffer limit and only
	// its complete prefix was read (ParseText with truncated set).
	Truncated bool

	// PromptChars is the number of bytes written to the text writer,
	// framing included: the input for a ~4 chars/token estimate.
	// PromptTokensExact counts the token ids of a token-id prompt (else 0).
	// PromptBad reports a prompt of the wrong shape: the text written is
	// the head before the bad part.
	PromptChars       int
	PromptTokensExact int
	PromptBad         bool
}

// Parser extracts a Request from OpenAI request bodies without allocating in
// steady state. The zero value is ready to use. A Parser is not safe for
// concurrent use; keep one per HTTP context or per VM (the plugin is single
// threaded per VM).
type Parser struct {
	rd, sub, sub2, sub3 jsonx.Reader // the sub readers re-read values out of order
	tape                jsonx.Tape
	tapeBuf             [tapeEntries]uint32
	err                 Error
	scratch             [unescapeChunk]byte
	model               [MaxModelBytes]byte
	one                 [1]byte
	hexbuf              [18]byte
	sink                sink
	pending             [outBytes]byte // output not yet written, see emit
	pendingLen          int
	// held is a message's content read before its role, decoded by
	// jsonx.Reader.AppendString; it grows (doubling) to the longest such
	// content seen and is reused.
	held []byte
	// slow turns fastMessages off, so that tests can hold it to message.
	slow bool
	// match is the memo's last answer in this parse (remembered).
	match memoMatched

	// The body being parsed and how.
	kind   Kind
	doc    []byte
	prefix bool // doc may be cut (truncated)

	// A Messages or Responses prompt met before its system prompt waits
	// (see writeDeferred): the values' offsets, -1 when not met.
	preambleAt, promptAt int
	preambleSeen         bool
	// inSystem is set while a Messages system prompt's blocks are written.
	inSystem bool
	// The members of a Responses input item and of a Messages tool block,
	// kept here so that chat's messages and parts do not clear them.
	item item
	tool toolBlock
	// systemChars is the length of the text the system prompt wrote (it is
	// written first): FuzzParseMessages compares the rest.
	systemChars int

	// Field state.
	out                *Request
	first              *Error
	maxTok, maxCompTok int64
	hasMax, hasMaxComp bool

	// Prompt state.
	w        io.Writer
	memo     Memo // w, when it remembers long strings
	n        int
	tokens   int
	werr     error
	stop     bool // the prompt had the wrong shape: write no more of it
	streamed bool // the prompt field was met
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
	case PathMessages:
		return Messages, true
	case PathResponses:
		return Responses, true
	}
	return 0, false
}

// ParseText reads the fields of body into out and writes its prompt into w
// in one forward pass: the prompt is decoded into w while the whole body is
// validated. Because the prompt is written before the rest of the body is
// read (clients put "model" anywhere, the OpenAI Python SDK after
// "messages"), a caller that keys the text by model defers that
// (prefix.Hasher.ResetDeferred, then SetSeed). out.PromptChars,
// PromptTokensExact and PromptBad describe what was written. Equal prompts
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
//	messages (Anthropic):           "system" SepRole system SepMessage, then
//	                                the messages as chat's; content blocks as
//	                                parts, tool and thinking blocks as block
//	                                (messages.go) writes them
//	responses:                      "system" SepRole instructions SepMessage,
//	                                then the input: a string as "user" SepRole
//	                                text SepMessage, items as chat messages or
//	                                as item (responses.go) writes them
//
// JSON escapes are decoded (\uXXXX surrogate pairs to UTF-8, lone
// surrogates to U+FFFD as encoding/json does); invalid UTF-8 passes through.
// A nil w is io.Discard.
//
// With truncated set, body may be cut at the buffer limit ("past the limit,
// route on what was read"): the longest usable prefix is read, values
// complete before the cut plus the readable head of a prompt string that the
// cut falls in (never a partial escape or half a surrogate pair). A number or
// literal at the cut is dropped (it may continue), a cut-off "model" reads as
// absent (ErrNoModel), out.Truncated is set, and the text written is a prefix
// of what the whole body writes: the separator that closes the last,
// unfinished message is not written (TestTruncatedIsPrefix). A complete body
// reads the same either way.
//
// Errors are *Error values (see Code), in this order: syntax errors
// (CodeNotJSON, CodeTooDeep, CodeTruncated), which leave out zeroed except
// Kind and for which the text written must be discarded (it may be the head
// of a body that is not JSON); then w's error; then the first field error,
// prompt shape errors included (see PromptBad). For ErrNoModel and
// ErrBadField every other field is still filled (the bad field reads as
// absent), so the caller may route on what is known or on load alone. A body
// with the prompt field twice writes the first one and fails with
// CodeBadField on the second (JSON decoders keep the last; a duplicated
// prompt key is no client's output, and its text cannot be unwritten).
//
// Field rules: "max_tokens" and "max_completion_tokens" (chat, completions)
// and "max_output_tokens" (responses) must be JSON integers in [0, 2^63-1] or
// null (negative, fractional, exponent or overflowing values are ErrBadField;
// servers reject such requests too); the Messages API's "max_tokens" is
// required and >= 1. "n" must be an integer >= 1 or null. "stream" and
// "stream_options.include_usage" must be booleans or null. "system"
// (messages) is a string or an array of blocks, "instructions" and
// "previous_response_id" (responses) strings, all three or null. Fields of
// other endpoints and unknown fields are skipped unexamined except for
// syntax.
func (p *Parser) ParseText(kind Kind, body []byte, truncated bool, w io.Writer, out *Request) error {
	if w == nil {
		w = io.Discard
	}
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
// reader validates, and the prompt is decoded into p.w.
func (p *Parser) parse(kind Kind, body []byte, out *Request, truncOK bool) error {
	*out = Request{Kind: kind, N: 1}
	p.kind, p.doc, p.prefix = kind, body, truncOK
	p.preambleAt, p.promptAt, p.preambleSeen, p.systemChars = -1, -1, false, 0
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
	if p.promptAt >= 0 {
		p.writeDeferred()
	}
	if p.kind == Messages || p.kind == Responses {
		out.IncludeUsage = out.Stream
	}
	if p.kind == Messages && !p.hasMax && !out.Truncated {
		p.fail(CodeBadField, FieldMaxTokens, ruleRequired, nil)
	}
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
	ruleRequired = "an integer >= 1 (required)"
	ruleSystem   = "a string, an array of content blocks or null"
	ruleInput    = "a string, an array of input items or null"
	ruleItems    = "an array of input item objects"
	ruleIDLen    = "a string of at most 256 bytes"
)

func (p *Parser) topField(r *jsonx.Reader) {
	out := p.out
	openAI := p.kind == Completion || p.kind == Chat // the fields only these endpoints have
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
		switch p.kind {
		case Messages:
			p.maxTok, p.hasMax = p.count(FieldMaxTokens, r.Value(), 1, ruleRequired)
		case Responses:
			r.Skip()
		default:
			p.maxTok, p.hasMax = p.count(FieldMaxTokens, r.Value(), 0, ruleCount)
		}
	case FieldMaxCompletionTokens:
		if !openAI {
			r.Skip()
			return
		}
		p.maxCompTok, p.hasMaxComp = p.count(FieldMaxCompletionTokens, r.Value(), 0, ruleCount)
	case FieldMaxOutputTokens:
		if p.kind != Responses {
			r.Skip()
			return
		}
		p.maxTok, p.hasMax = p.count(FieldMaxOutputTokens, r.Value(), 0, ruleCount)
	case FieldN:
		if !openAI {
			r.Skip()
			return
		}
		if n, ok := p.count(FieldN, r.Value(), 1, ruleN); ok {
			out.N = n
		}
	case FieldStream:
		out.Stream = p.boolean(FieldStream, r.Value())
	case FieldStreamOptions:
		switch k := r.Kind(); {
		case !openAI, k == jsonx.None, k == jsonx.Null:
			r.Skip()
		case k == jsonx.Object:
			r.Object()
			for r.Member() {
				if string(r.Key()) == FieldIncludeUsage {
					out.IncludeUsage = p.boolean(FieldIncludeUsage, r.Value())
				}
			}
		default:
			p.fail(CodeBadField, FieldStreamOptions, ruleObject, r.Value().Raw)
		}
	case FieldPreviousResponseID:
		if p.kind != Responses {
			r.Skip()
			return
		}
		p.previousResponse(r.Value())
	case FieldSystem, FieldInstructions:
		if string(r.Key()) != preambleName(p.kind) {
			r.Skip()
			return
		}
		p.preambleField(r)
	case FieldPrompt, FieldMessages, FieldInput:
		if string(r.Key()) != promptName(p.kind) {
			r.Skip()
			return
		}
		p.promptField(r)
	default:
		r.Skip()
	}
}

// promptName is the field that holds kind's prompt.
func promptName(k Kind) string {
	switch k {
	case Completion:
		return FieldPrompt
	case Responses:
		return FieldInput
	}
	return FieldMessages
}

// preambleName is the field that holds kind's system prompt, written before
// the prompt wherever the body puts it; "" when kind has none.
func preambleName(k Kind) string {
	switch k {
	case Messages:
		return FieldSystem
	case Responses:
		return FieldInstructions
	}
	return ""
}

// promptField reads the prompt due next in r. It is written now, in the
// same pass, unless kind has a system prompt that has not been met yet:
// then it is validated and its offset kept for writeDeferred (clients put
// "system" and "instructions" after the prompt too, the Anthropic and
// OpenAI Python SDKs among them). The tape records the strings read, so
// that values read again out of order are copied rather than scanned.
func (p *Parser) promptField(r *jsonx.Reader) {
	if p.streamed {
		p.fail(CodeBadField, promptName(p.kind), ruleOnce, r.Value().Raw)
		return
	}
	p.streamed = true
	r.RecordTape(&p.tape)
	if preambleName(p.kind) != "" && !p.preambleSeen {
		if v := r.Value(); v.Kind != jsonx.None { // None: cut before the value began
			p.promptAt = v.Off
		}
	} else {
		depth := r.Depth()
		p.writePromptValue(r)
		r.Unwind(depth) // a shape error stops writing, not reading
	}
	r.RecordTape(nil)
}

// preambleField reads the system prompt due next in r: written now when
// the prompt is still to come, else kept for writeDeferred.
func (p *Parser) preambleField(r *jsonx.Reader) {
	if p.preambleSeen {
		p.fail(CodeBadField, preambleName(p.kind), ruleOnce, r.Value().Raw)
		return
	}
	p.preambleSeen = true
	if !p.streamed {
		depth := r.Depth()
		p.writePreamble(r)
		r.Unwind(depth)
		return
	}
	r.RecordTape(&p.tape)
	if v := r.Value(); v.Kind != jsonx.None {
		p.preambleAt = v.Off
	}
	r.RecordTape(nil)
}

// writeDeferred writes, once the body is read, a prompt that came before
// its system prompt: the system prompt first, then the prompt, re-read from
// their offsets through the tape. A system prompt the cut falls in ends the
// text. When a cut body ends before its system prompt, the prompt is written
// without it: what the whole body writes then begins with the system
// prompt, and the cut body's text is not its prefix (FuzzParseMessages
// allows for that one case).
func (p *Parser) writeDeferred() {
	if p.preambleAt >= 0 {
		r := p.at(&p.rd, p.preambleAt)
		if p.writePreamble(r); r.Truncated() {
			return
		}
	}
	p.writePromptValue(p.at(&p.rd, p.promptAt))
}

// writePromptValue writes the prompt value due next in r, by kind; after
// a shape error (PromptBad) nothing more is written.
func (p *Parser) writePromptValue(r *jsonx.Reader) {
	if !p.ok() {
		r.Skip()
		return
	}
	switch p.kind {
	case Completion:
		p.writePrompt(r)
	case Responses:
		p.writeInput(r)
	default:
		p.writeMessages(r)
	}
	p.flush()
	p.out.PromptBad = p.stop
}

// writePreamble writes the system prompt due next in r, by kind.
func (p *Parser) writePreamble(r *jsonx.Reader) {
	if !p.ok() {
		r.Skip()
		return
	}
	if p.kind == Messages {
		p.writeSystem(r)
	} else {
		p.writeInstructions(r)
	}
	p.flush()
	p.systemChars = p.n
	p.out.PromptBad = p.stop
}

// count parses an integer field >= min (the bound rule names), null
// meaning absent.
func (p *Parser) count(field string, v jsonx.Value, min int64, rule string) (int64, bool) {
	if v.Kind == jsonx.Null || v.Kind == jsonx.None {
		return 0, false
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

// at points r at the value starting at off in the body, in the mode the
// body is read in, so a cut value reads exactly as it did the first time.
func (p *Parser) at(r *jsonx.Reader, off int) *jsonx.Reader {
	if p.prefix {
		r.ResetPrefixAt(p.doc, off)
	} else {
		r.ResetAt(p.doc, off)
	}
	r.UseTape(&p.tape)
	return r
}
