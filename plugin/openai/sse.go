package openai

import (
	"bytes"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// MaxLineBytes bounds one server-sent-event line. Longer lines (e.g. events
// with large logprobs) are skipped without parsing; the carry buffer that
// joins a line split across chunks has this size.
const MaxLineBytes = 8 << 10

// Wire names in OpenAI-compatible streamed and non-streamed responses.
const (
	sseData          = "data:"
	sseDone          = "[DONE]"
	FieldChoices     = "choices"
	FieldDelta       = "delta"
	FieldFinish      = "finish_reason"
	FieldUsage       = "usage"
	FieldReasoning   = "reasoning_content" // vLLM/SGLang reasoning parsers
	FieldReasoning2  = "reasoning"         // newer vLLM name
	FieldPromptTok   = "prompt_tokens"
	FieldCompleteTok = "completion_tokens"
)

// StreamCounter counts generated tokens in an OpenAI-compatible SSE response
// (`data: {json}\n\n` events ending with `data: [DONE]`), fed chunk by chunk
// at arbitrary split points. The zero value is ready; it is not safe for
// concurrent use, allocates nothing, and never panics.
//
// Counting rule: every choice in a data event whose delta carries non-empty
// "content", "reasoning_content" or "reasoning", or any "tool_calls", or
// (completions) non-empty "text", counts as one token. vLLM, SGLang and TGI
// stream one event per decode step per choice, so this is exact for plain
// decoding. Exceptions, all undercounts: speculative decoding and SGLang's
// --stream-interval > 1 put several tokens in one event; detokenizers hold
// back text that is not yet a whole UTF-8 character or might be a stop string
// and emit it later in one event; vLLM's first chat event (role only, empty
// content) and empty final events count nothing, correctly. A "usage" object
// (stream_options.include_usage, or vLLM's continuous usage stats) is exact and
// preferred by Tokens.
//
// Lines end at '\n' (a preceding '\r' is dropped); a lone '\r' as line end is
// not recognised. Each data line is parsed on its own: an event whose JSON is
// split over several data lines (legal SSE, not emitted by these servers) is
// counted as events without content.
type StreamCounter struct {
	// Events counts data lines other than [DONE].
	Events int
	// ContentDeltas counts choices that carried generated text (see above).
	ContentDeltas int
	// Oversized counts data lines longer than MaxLineBytes; each also counts
	// as one event and one content delta (large events are content).
	Oversized int
	// UsageCompletionTokens and UsagePromptTokens are the largest values seen
	// in usage objects; HasUsage reports that one was seen.
	UsageCompletionTokens int64
	UsagePromptTokens     int64
	HasUsage              bool
	// Finished reports a choice with a non-null finish_reason; Done the
	// final `data: [DONE]`.
	Finished bool
	Done     bool

	carry    [MaxLineBytes]byte
	carryLen int
	skipping bool // inside an oversized line, until '\n'

	rd jsonx.Reader // reads one data line

	// The template: the last event fastEvent read whose first choice had
	// text, as its bytes before that text's contents (tmpl[:tmplHead],
	// through the opening quote) and after them (the next tmplTail bytes,
	// from the closing quote), with what it counted. A server sends every
	// token event of a response alike but for that text, so an event that
	// is the template's bytes around other non-empty, valid string
	// contents counts what the template did, and its JSON is not walked:
	// a walk would read the same bytes to the same end. Walking each event
	// is most of a streamed chunk's cost (BenchmarkStreamCounterEvent);
	// FuzzStreamTemplate holds the template to the walk.
	tmpl       [tmplRoom]byte
	tmplHead   int
	tmplTail   int
	tmplEv     eventCounts
	tmplOK     bool
	noTemplate bool // tests: walk every event
}

// tmplRoom bounds a template's bytes: an event's envelope (ids, model
// name, the choice's other fields) is a few hundred bytes.
const tmplRoom = 1024

// Reset prepares c for a new response.
func (c *StreamCounter) Reset() {
	c.Events, c.ContentDeltas, c.Oversized = 0, 0, 0
	c.UsageCompletionTokens, c.UsagePromptTokens, c.HasUsage = 0, 0, false
	c.Finished, c.Done = false, false
	c.carryLen, c.skipping = 0, false
	c.tmplOK = false
}

// Tokens returns the completion tokens so far: the usage count when the
// server sent one, else ContentDeltas (a lower bound, see the type doc).
func (c *StreamCounter) Tokens() int64 {
	if c.HasUsage {
		return c.UsageCompletionTokens
	}
	return int64(c.ContentDeltas)
}

// Write feeds the next chunk of the response body. It never fails; it
// implements io.Writer so a body can be copied into it.
func (c *StreamCounter) Write(chunk []byte) (int, error) {
	n := len(chunk)
	for len(chunk) > 0 {
		if c.skipping {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				return n, nil
			}
			c.skipping = false
			chunk = chunk[i+1:]
			continue
		}
		if c.carryLen == 0 && c.tmplOK {
			if k := c.templateEvent(chunk); k > 0 {
				c.Events++
				c.add(&c.tmplEv)
				chunk = chunk[k:]
				continue
			}
		}
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 { // the line continues in the next chunk
			if c.carryLen+len(chunk) > MaxLineBytes {
				c.oversized(chunk)
				return n, nil
			}
			c.carryLen += copy(c.carry[c.carryLen:], chunk)
			return n, nil
		}
		switch {
		case c.carryLen+i > MaxLineBytes:
			c.oversized(chunk)
			c.skipping = false // the '\n' is at i
		case c.carryLen > 0:
			c.carryLen += copy(c.carry[c.carryLen:], chunk[:i])
			c.line(c.carry[:c.carryLen])
			c.carryLen = 0
		default:
			c.line(chunk[:i])
		}
		chunk = chunk[i+1:]
	}
	return n, nil
}

// oversized handles a line known to exceed MaxLineBytes whose head is
// c.carry[:c.carryLen] followed by rest.
func (c *StreamCounter) oversized(rest []byte) {
	var head [len(sseData)]byte
	h := copy(head[:], c.carry[:c.carryLen])
	copy(head[h:], rest)
	if string(head[:]) == sseData {
		c.Events++
		c.ContentDeltas++
		c.Oversized++
	}
	c.carryLen = 0
	c.skipping = true
}

func (c *StreamCounter) line(l []byte) {
	if len(l) > 0 && l[len(l)-1] == '\r' {
		l = l[:len(l)-1]
	}
	if len(l) < len(sseData) || string(l[:len(sseData)]) != sseData {
		return // blank line (event end), comment, event:, id:, retry:
	}
	l = l[len(sseData):]
	if len(l) > 0 && l[0] == ' ' {
		l = l[1:]
	}
	if string(l) == sseDone {
		c.Done = true
		return
	}
	c.Events++
	if c.tmplOK && c.fromTemplate(l) {
		c.add(&c.tmplEv)
		return
	}
	if ev, ok := fastEvent(l); ok {
		c.add(&ev)
		c.learn(l, &ev)
		return
	}
	c.slowLine(l)
}

// add counts what one event carried.
func (c *StreamCounter) add(ev *eventCounts) {
	c.ContentDeltas += ev.deltas
	c.Finished = c.Finished || ev.finished
	if ev.hasUsage {
		c.HasUsage = true
		c.UsageCompletionTokens = max(c.UsageCompletionTokens, ev.usageC)
		c.UsagePromptTokens = max(c.UsagePromptTokens, ev.usageP)
	}
}

// learn makes event l, which fastEvent counted as ev, the template when
// its first choice had text and its bytes fit.
func (c *StreamCounter) learn(l []byte, ev *eventCounts) {
	head, tail := ev.textFrom, len(l)-ev.textTo
	if c.noTemplate || ev.textTo <= ev.textFrom || head+tail > tmplRoom {
		return
	}
	copy(c.tmpl[:head], l[:head])
	copy(c.tmpl[head:head+tail], l[ev.textTo:])
	c.tmplHead, c.tmplTail, c.tmplEv, c.tmplOK = head, tail, *ev, true
}

// fromTemplate reports whether event l is the template's bytes around
// non-empty valid string contents.
func (c *StreamCounter) fromTemplate(l []byte) bool {
	head, tail := c.tmplHead, c.tmplTail
	if len(l) <= head+tail || !prefix.SameBytes(l[:head], c.tmpl[:head]) {
		return false
	}
	end, _ := jsonx.StringEnd(l, head)
	return end == len(l)-tail && prefix.SameBytes(l[end:], c.tmpl[head:head+tail])
}

// templateEvent returns the length, newline included, of the line that
// chunk starts with when it is "data: " and an event fromTemplate counts,
// ended by '\n'; else 0. Such a line holds no other newline (the
// template's bytes come from a line, and a JSON string holds no control
// byte), so it is the line Write would find, without the search for its
// end, a large part of a token event's cost (BenchmarkStreamCounterEvent).
func (c *StreamCounter) templateEvent(chunk []byte) int {
	const dataPrefix = sseData + " "
	p, head, tail := len(dataPrefix), c.tmplHead, c.tmplTail
	if len(chunk) <= p+head+tail || string(chunk[:p]) != dataPrefix ||
		tail > 0 && c.tmpl[head+tail-1] == '\r' || // line would strip it
		!prefix.SameBytes(chunk[p:p+head], c.tmpl[:head]) {
		return 0
	}
	end, _ := jsonx.StringEnd(chunk, p+head)
	if end <= p+head || end+tail >= len(chunk) || chunk[end+tail] != '\n' ||
		!prefix.SameBytes(chunk[end:end+tail], c.tmpl[head:head+tail]) {
		return 0
	}
	return end + tail + 1
}

// slowLine reads a data event with the jsonx walk (fastEvent declined it).
// Each event is read as far as it is valid JSON: what was counted before a
// syntax error stays counted, as the servers never send broken events.
func (c *StreamCounter) slowLine(l []byte) {
	r := &c.rd
	r.Reset(l)
	if !r.Object() {
		return
	}
	for r.Member() {
		switch string(r.Key()) {
		case FieldChoices:
			if r.Kind() == jsonx.Array {
				r.Array()
				for r.Elem() {
					if r.Kind() == jsonx.Object {
						c.choice(r)
					}
				}
			}
		case FieldUsage:
			if r.Kind() == jsonx.Object {
				if u, ok := usageObject(r); ok {
					c.HasUsage = true
					c.UsageCompletionTokens = max(c.UsageCompletionTokens, u.CompletionTokens)
					c.UsagePromptTokens = max(c.UsagePromptTokens, u.PromptTokens)
				}
			}
		}
	}
}

// choice reads one element of "choices" and counts it when it carried
// generated text.
func (c *StreamCounter) choice(r *jsonx.Reader) {
	hit := false
	r.Object()
	for r.Member() {
		switch string(r.Key()) {
		case FieldDelta:
			if r.Kind() != jsonx.Object {
				continue
			}
			r.Object()
			for r.Member() {
				switch string(r.Key()) {
				case FieldContent, FieldReasoning, FieldReasoning2:
					if v := r.Value(); v.Kind == jsonx.String && len(v.Raw) > 0 {
						hit = true
					}
				case FieldToolCalls:
					if r.Kind() == jsonx.Array {
						r.Array()
						if r.Elem() { // any element: a tool-call delta
							hit = true
							for r.Elem() { // leave the array: the delta's members go on
							}
						}
					}
				}
			}
		case FieldText:
			if v := r.Value(); v.Kind == jsonx.String && len(v.Raw) > 0 {
				hit = true
			}
		case FieldFinish:
			if k := r.Value().Kind; k != jsonx.Null && k != jsonx.None {
				c.Finished = true
			}
		}
	}
	if hit {
		c.ContentDeltas++
	}
}

// Usage is the token accounting of a response.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
}

// ParseUsage reads "usage" from a complete non-streamed response body. ok is
// false when the body has no usage object with a non-negative integer
// "completion_tokens" (a missing or bad "prompt_tokens" reads as 0).
func ParseUsage(body []byte) (u Usage, ok bool) {
	var r jsonx.Reader
	r.Reset(body)
	if !r.Object() {
		return Usage{}, false
	}
	for r.Member() {
		if string(r.Key()) != FieldUsage {
			continue
		}
		// The first "usage" decides; the rest of the body is not read.
		if r.Kind() != jsonx.Object {
			return Usage{}, false
		}
		return usageObject(&r)
	}
	return Usage{}, false
}

// usageObject reads the usage object due next in r. A member that is not a
// non-negative integer is ignored; a syntax error inside voids the object.
func usageObject(r *jsonx.Reader) (u Usage, ok bool) {
	r.Object()
	for r.Member() {
		v := r.Value()
		if v.Kind != jsonx.Number {
			continue
		}
		n, good := jsonx.ParseInt(v.Raw)
		if !good || n < 0 {
			continue
		}
		switch string(r.Key()) {
		case FieldCompleteTok:
			u.CompletionTokens, ok = n, true
		case FieldPromptTok:
			u.PromptTokens = n
		}
	}
	if r.Err() != nil {
		return Usage{}, false
	}
	return u, ok
}
