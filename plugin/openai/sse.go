package openai

import (
	"bytes"
	"io"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// MaxLineBytes bounds one server-sent-event line. Longer lines (e.g. events
// with large logprobs) are skipped without parsing; the carry buffer that
// joins a line split across chunks has this size.
const MaxLineBytes = 8 << 10

// Wire names in streamed and non-streamed responses.
const (
	sseData         = "data:"
	sseDone         = "[DONE]"
	FieldChoices    = "choices"
	FieldDelta      = "delta"
	FieldFinish     = "finish_reason"
	FieldUsage      = "usage"
	FieldReasoning  = "reasoning_content" // vLLM/SGLang reasoning parsers
	FieldReasoning2 = "reasoning"         // newer vLLM name
	FieldIndex      = "index"
	FieldID         = "id"
	FieldMessage    = "message"
)

// StreamCounter reads a server-sent-event response, fed chunk by chunk at
// arbitrary split points: it counts generated tokens, reads the usage the
// engine reports, and can record the answer's text (Record). It reads the
// streams of the four endpoints: chat and completions (`data: {json}`
// events ending with `data: [DONE]`), the Messages API (`event:` lines,
// typed events from message_start to message_stop) and the Responses API
// (typed events up to response.completed). The zero value is ready; it is
// not safe for concurrent use, allocates nothing, and never panics.
//
// Counting rule: every choice in a data event whose delta carries non-empty
// "content", "reasoning_content" or "reasoning", or any "tool_calls", or
// (completions) non-empty "text", counts as one token; so does a Messages
// content_block_delta with non-empty text, thinking or partial_json, and a
// Responses response.*.delta event with a non-empty delta. vLLM, SGLang and
// TGI stream one event per decode step per choice, so this is exact for plain
// decoding. Exceptions, all undercounts: speculative decoding and SGLang's
// --stream-interval > 1 put several tokens in one event; detokenizers hold
// back text that is not yet a whole UTF-8 character or might be a stop string
// and emit it later in one event; vLLM's first chat event (role only, empty
// content) and empty final events count nothing, correctly. A "usage" object
// (stream_options.include_usage, vLLM's continuous usage stats, a Messages
// message_delta, a Responses response.completed) is exact and preferred by
// Tokens; the usage in a Messages message_start gives the prompt's counts
// only (its output count is not the answer's).
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
	// UsageCompletionTokens, UsagePromptTokens and UsageCachedTokens are
	// the largest values seen in usage objects (see Usage for each
	// endpoint's fields). HasUsage reports a completion count, HasCached a
	// cached-token count: absent is not 0.
	UsageCompletionTokens int64
	UsagePromptTokens     int64
	UsageCachedTokens     int64
	HasUsage              bool
	HasCached             bool
	// ResponseID is FNV-1a 64 of a Responses API stream's response "id"
	// (in response.created), HasResponseID whether one was seen: the value
	// a later request's Request.PreviousResponseID names it by.
	ResponseID    uint64
	HasResponseID bool
	// Finished reports a choice with a non-null finish_reason, a Messages
	// stop_reason or a finished Responses response; Done the stream's last
	// event: `data: [DONE]`, message_stop, or response.completed,
	// response.incomplete or response.failed.
	Finished bool
	Done     bool

	carry    [MaxLineBytes]byte
	carryLen int
	skipping bool // inside an oversized line, until '\n'

	rd    jsonx.Reader // reads one data line, or a reply body (Reply)
	parts jsonx.Reader // a Responses reply's message parts
	ans   answer

	// The template: the last event whose answer text was non-empty, as its
	// bytes before that text's contents (tmpl[:tmplHead], through the
	// opening quote) and after them (the next tmplTail bytes, from the
	// closing quote), with what it counted. A server sends every token
	// event of a response alike but for that text, so an event that is the
	// template's bytes around other non-empty, valid string contents
	// counts what the template did, and its JSON is not walked: a walk
	// would read the same bytes to the same end. Walking each event is
	// most of a streamed chunk's cost (BenchmarkStreamCounterEvent);
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

// Reset prepares c for a new response; it records no answer until Record.
func (c *StreamCounter) Reset() {
	c.Events, c.ContentDeltas, c.Oversized = 0, 0, 0
	c.UsageCompletionTokens, c.UsagePromptTokens, c.UsageCachedTokens = 0, 0, 0
	c.HasUsage, c.HasCached, c.ResponseID, c.HasResponseID = false, false, 0, false
	c.Finished, c.Done = false, false
	c.carryLen, c.skipping = 0, false
	c.tmplOK = false
	c.ans.reset(0, nil)
}

// Record names the endpoint of kind the response answers and makes c write
// the answer's text into w as the stream goes (or Reply reads the body),
// framed as ParseText frames the assistant turn that quotes it in the next
// request (see answer.go): the prompt's prefix chain, continued with what w
// is given, begins the next request's chain. A nil w records nothing. Call
// it after Reset, before the first Write.
func (c *StreamCounter) Record(kind Kind, w io.Writer) { c.ans.reset(kind, w) }

// Answer returns the bytes of the answer's text written to the Record
// writer so far, and whether the stream ended whole and the turn's closing
// separator was written (completions: the text ended).
func (c *StreamCounter) Answer() (chars int64, whole bool) { return c.ans.chars, c.ans.whole }

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
			if k, end, escaped := c.templateEvent(chunk); k > 0 {
				c.Events++
				c.apply(&c.tmplEv, chunk, len(sseData)+1+c.tmplHead, end, !escaped)
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
// c.carry[:c.carryLen] followed by rest. Its text cannot be recorded, so
// the answer's text ends there.
func (c *StreamCounter) oversized(rest []byte) {
	var head [len(sseData)]byte
	h := copy(head[:], c.carry[:c.carryLen])
	copy(head[h:], rest)
	if string(head[:]) == sseData {
		c.Events++
		c.ContentDeltas++
		c.Oversized++
		c.ans.stop()
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
		c.ans.end()
		return
	}
	c.Events++
	if c.tmplOK && c.fromTemplate(l) {
		c.apply(&c.tmplEv, l, c.tmplHead, len(l)-c.tmplTail, false)
		return
	}
	var ev eventCounts
	if !fastEvent(l, &ev) {
		ev = eventCounts{}
		c.walkEvent(l, &ev)
	}
	ev.seal()
	c.apply(&ev, l, ev.textFrom, ev.textTo, false)
	c.learn(l, &ev)
}

// apply counts what one event carried and records its answer text, the
// raw string contents d[from:to] (plain: known to hold no escape, so they
// are the text). A token event with nothing to record takes the first
// lines alone (BenchmarkStreamCounterEvent), a token of the text being
// recorded the next (BenchmarkStreamCounterRecord).
func (c *StreamCounter) apply(ev *eventCounts, d []byte, from, to int, plain bool) {
	c.ContentDeltas += ev.deltas
	switch {
	case !ev.more && c.ans.state == answerOff:
	case !ev.more && plain && to > from && c.ans.state == answerWriting && ev.block == c.ans.block:
		c.ans.Write(d[from:to])
	default:
		c.applyMore(ev, d, from, to)
	}
}

// applyMore is the rest of apply: the finish, usage, the response id, the
// answer.
func (c *StreamCounter) applyMore(ev *eventCounts, d []byte, from, to int) {
	c.Finished = c.Finished || ev.finished
	if ev.hasCompletion {
		c.HasUsage = true
		c.UsageCompletionTokens = max(c.UsageCompletionTokens, ev.usage.CompletionTokens)
	}
	if ev.hasPrompt {
		c.UsagePromptTokens = max(c.UsagePromptTokens, ev.usage.PromptTokens)
	}
	if ev.usage.HasCached {
		c.HasCached = true
		c.UsageCachedTokens = max(c.UsageCachedTokens, ev.usage.CachedTokens)
	}
	if ev.idTo > ev.idFrom && !c.HasResponseID {
		c.ResponseID, c.HasResponseID = idHash(d[ev.idFrom:ev.idTo]), true
	}
	if ev.textTo > ev.textFrom {
		c.ans.text(d, from, to, ev.block)
	}
	if ev.stop {
		c.ans.stop()
	}
	if ev.end {
		c.Done = true
		c.ans.end()
	}
}

// learn makes event l, counted as ev, the template when it carried answer
// text and its bytes fit. An event with a response id is never one: the id
// is not the template's to repeat.
func (c *StreamCounter) learn(l []byte, ev *eventCounts) {
	head, tail := ev.textFrom, len(l)-ev.textTo
	if c.noTemplate || ev.textTo <= ev.textFrom || ev.idTo > ev.idFrom || head+tail > tmplRoom {
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
// ended by '\n' and at most MaxLineBytes long (a longer one is oversized),
// the offset in chunk of its text's closing quote and whether the text
// holds an escape; else 0. Such a line holds no other newline (the
// template's bytes come from a line, and a JSON string holds no control
// byte), so it is the line Write would find, without the search for its
// end, a large part of a token event's cost (BenchmarkStreamCounterEvent).
func (c *StreamCounter) templateEvent(chunk []byte) (n, end int, escaped bool) {
	const dataPrefix = sseData + " "
	p, head, tail := len(dataPrefix), c.tmplHead, c.tmplTail
	if len(chunk) <= p+head+tail || string(chunk[:p]) != dataPrefix ||
		tail > 0 && c.tmpl[head+tail-1] == '\r' || // line would strip it
		!prefix.SameBytes(chunk[p:p+head], c.tmpl[:head]) {
		return 0, 0, false
	}
	end, escaped = jsonx.StringEnd(chunk, p+head)
	if end <= p+head || end+tail >= len(chunk) || chunk[end+tail] != '\n' || end+tail > MaxLineBytes ||
		!prefix.SameBytes(chunk[end:end+tail], c.tmpl[head:head+tail]) {
		return 0, 0, false
	}
	return end + tail + 1, end, escaped
}
