package gateway

import (
	"bytes"
	"errors"
	"strconv"
	"sync"

	"github.com/gpuroute/gpuroute/plugin/openai"
)

// The two APIs agents speak, answered from the same engine run as a chat
// completion. Field and event names follow Anthropic's Messages API
// reference (vLLM's vllm/entrypoints/anthropic serves the same shapes) and
// OpenAI's Responses API reference (vLLM's vllm/entrypoints/openai
// responses). Every simulated answer stops at its output bound, so a message
// ends with stop_reason "max_tokens" and a response has status "incomplete"
// with incomplete_details.reason "max_output_tokens", the stream's last
// event being response.incomplete.
const (
	// PathMessages is the Anthropic Messages endpoint.
	PathMessages = openai.PathMessages
	// PathResponses is the OpenAI Responses endpoint.
	PathResponses = openai.PathResponses

	stopMaxTokens           = "max_tokens"
	incompleteMaxOutput     = "max_output_tokens"
	eventMessageStart       = "message_start"
	eventBlockStart         = "content_block_start"
	eventBlockDelta         = "content_block_delta"
	eventBlockStop          = "content_block_stop"
	eventMessageDelta       = "message_delta"
	eventMessageStop        = "message_stop"
	eventResponseCreated    = "response.created"
	eventItemAdded          = "response.output_item.added"
	eventPartAdded          = "response.content_part.added"
	eventTextDelta          = "response.output_text.delta"
	eventTextDone           = "response.output_text.done"
	eventPartDone           = "response.content_part.done"
	eventItemDone           = "response.output_item.done"
	eventResponseIncomplete = "response.incomplete"
)

// parsers hold the plugin's request parsers (each too large to allocate
// per request and not safe for concurrent use).
var parsers = sync.Pool{New: func() any { return new(openai.Parser) }}

// readAgentRequest parses a Messages or Responses body with the plugin's
// parser, so the prompt the engine caches is the text the router hashes:
// the model, the flattened prompt, the output bound (the Messages API
// requires max_tokens; max_output_tokens defaults to defaultMaxTokens) and
// whether to stream.
func readAgentRequest(kind openai.Kind, body []byte) (request, error) {
	p := parsers.Get().(*openai.Parser)
	defer parsers.Put(p)
	var text bytes.Buffer
	var out openai.Request
	if err := p.ParseText(kind, body, false, &text, &out); err != nil {
		return request{}, errors.New("replica: " + err.Error())
	}
	if out.PromptBad {
		return request{}, errors.New("replica: the prompt has the wrong shape after " + strconv.Quote(text.String()))
	}
	q := request{model: string(out.Model), prompt: text.String(), maxTokens: defaultMaxTokens, stream: out.Stream}
	if out.HasMaxTokens {
		n, err := outputBound(out.MaxTokens)
		if err != nil {
			return request{}, err
		}
		q.maxTokens = n
	}
	return q, nil
}

// messagesWriter renders an Anthropic Messages answer: message_start,
// content_block_start, a content_block_delta (text_delta) per token,
// content_block_stop, message_delta with the stop reason and usage,
// message_stop; or one message object.
type messagesWriter struct {
	sse
	id, model string
}

var _ answerWriter = (*messagesWriter)(nil)

// appendUsage appends the Messages usage object: input_tokens leaves the
// cached tokens out (Anthropic's rule), they are cache_read_input_tokens.
func (m *messagesWriter) appendUsage(b []byte, u tokenUsage) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.Prompt-u.Cached), 10)
	b = append(b, `,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.Cached), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(u.Output), 10)
	return append(b, '}')
}

// message appends the message object: content holds one text block when
// text is set (a streamed message_start carries an empty list).
func (m *messagesWriter) message(b []byte, text *string, stop string, u tokenUsage) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendQuote(b, m.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendJSONString(b, m.model)
	b = append(b, `,"content":[`...)
	if text != nil {
		b = appendTextBlock(b, *text)
	}
	b = append(b, `],"stop_reason":`...)
	b = appendNullable(b, stop)
	b = append(b, `,"stop_sequence":null,"usage":`...)
	b = m.appendUsage(b, u)
	return append(b, '}')
}

func appendTextBlock(b []byte, text string) []byte {
	b = append(b, `{"type":"text","text":`...)
	b = appendJSONString(b, text)
	return append(b, '}')
}

// appendNullable appends s quoted, or null when empty.
func appendNullable(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return strconv.AppendQuote(b, s)
}

func (m *messagesWriter) start(u tokenUsage) error {
	b := append([]byte(`{"type":"`+eventMessageStart+`","message":`), m.message(nil, nil, "", tokenUsage{Prompt: u.Prompt, Cached: u.Cached})...)
	if err := m.send(eventMessageStart, append(b, '}')); err != nil {
		return err
	}
	b = append([]byte(`{"type":"`+eventBlockStart+`","index":0,"content_block":`), appendTextBlock(nil, "")...)
	return m.send(eventBlockStart, append(b, '}'))
}

func (m *messagesWriter) token(text string, _ bool) error {
	b := []byte(`{"type":"` + eventBlockDelta + `","index":0,"delta":{"type":"text_delta","text":`)
	b = appendJSONString(b, text)
	return m.send(eventBlockDelta, append(b, "}}"...))
}

func (m *messagesWriter) end(_ string, u tokenUsage) error {
	if err := m.send(eventBlockStop, []byte(`{"type":"`+eventBlockStop+`","index":0}`)); err != nil {
		return err
	}
	b := []byte(`{"type":"` + eventMessageDelta + `","delta":{"stop_reason":"` + stopMaxTokens + `","stop_sequence":null},"usage":`)
	b = m.appendUsage(b, u)
	if err := m.send(eventMessageDelta, append(b, '}')); err != nil {
		return err
	}
	return m.send(eventMessageStop, []byte(`{"type":"`+eventMessageStop+`"}`))
}

func (m *messagesWriter) whole(text string, u tokenUsage) error {
	return writeWhole(m.w, append(m.message(nil, &text, stopMaxTokens, u), '\n'))
}

// responsesWriter renders an OpenAI Responses answer: response.created,
// output_item.added, content_part.added, an output_text.delta per token,
// output_text.done, content_part.done, output_item.done and the final
// response (every event numbered by sequence_number); or one response
// object.
type responsesWriter struct {
	sse
	id, itemID, model string
	created           int64
	seq               int
}

var _ answerWriter = (*responsesWriter)(nil)

// event starts an event object of type typ with its sequence number.
func (r *responsesWriter) event(typ string) []byte {
	b := []byte(`{"type":"` + typ + `","sequence_number":`)
	b = strconv.AppendInt(b, int64(r.seq), 10)
	r.seq++
	return b
}

// itemEvent is event with the output item's coordinates.
func (r *responsesWriter) itemEvent(typ string) []byte {
	b := r.event(typ)
	b = append(b, `,"item_id":`...)
	b = strconv.AppendQuote(b, r.itemID)
	return append(b, `,"output_index":0,"content_index":0`...)
}

func appendTextPart(b []byte, text string) []byte {
	b = append(b, `{"type":"output_text","text":`...)
	b = appendJSONString(b, text)
	return append(b, `,"annotations":[]}`...)
}

// item appends the message output item; text nil means no content yet.
func (r *responsesWriter) item(b []byte, text *string, status string) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendQuote(b, r.itemID)
	b = append(b, `,"type":"message","status":"`...)
	b = append(b, status...)
	b = append(b, `","role":"assistant","content":[`...)
	if text != nil {
		b = appendTextPart(b, *text)
	}
	return append(b, "]}"...)
}

// response appends the response object; u nil means no usage yet (a
// response still in progress).
func (r *responsesWriter) response(b []byte, text *string, u *tokenUsage) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendQuote(b, r.id)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, r.created, 10)
	if u == nil {
		b = append(b, `,"status":"in_progress","incomplete_details":null`...)
	} else {
		b = append(b, `,"status":"incomplete","incomplete_details":{"reason":"`+incompleteMaxOutput+`"}`...)
	}
	b = append(b, `,"model":`...)
	b = appendJSONString(b, r.model)
	b = append(b, `,"output":[`...)
	if text != nil {
		b = r.item(b, text, "incomplete")
	}
	b = append(b, `],"usage":`...)
	if u == nil {
		return append(b, "null}"...)
	}
	// input_tokens counts the cached ones too (OpenAI's rule).
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.Prompt), 10)
	b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(u.Cached), 10)
	b = append(b, `},"output_tokens":`...)
	b = strconv.AppendInt(b, int64(u.Output), 10)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.Prompt+u.Output), 10)
	return append(b, "}}"...)
}

func (r *responsesWriter) start(tokenUsage) error {
	b := append(r.event(eventResponseCreated), `,"response":`...)
	if err := r.send(eventResponseCreated, append(r.response(b, nil, nil), '}')); err != nil {
		return err
	}
	b = append(r.event(eventItemAdded), `,"output_index":0,"item":`...)
	if err := r.send(eventItemAdded, append(r.item(b, nil, "in_progress"), '}')); err != nil {
		return err
	}
	b = append(r.itemEvent(eventPartAdded), `,"part":`...)
	return r.send(eventPartAdded, append(appendTextPart(b, ""), '}'))
}

func (r *responsesWriter) token(text string, _ bool) error {
	b := append(r.itemEvent(eventTextDelta), `,"delta":`...)
	b = appendJSONString(b, text)
	return r.send(eventTextDelta, append(b, '}'))
}

func (r *responsesWriter) end(text string, u tokenUsage) error {
	b := append(r.itemEvent(eventTextDone), `,"text":`...)
	b = appendJSONString(b, text)
	if err := r.send(eventTextDone, append(b, '}')); err != nil {
		return err
	}
	b = append(r.itemEvent(eventPartDone), `,"part":`...)
	if err := r.send(eventPartDone, append(appendTextPart(b, text), '}')); err != nil {
		return err
	}
	b = append(r.event(eventItemDone), `,"output_index":0,"item":`...)
	if err := r.send(eventItemDone, append(r.item(b, &text, "incomplete"), '}')); err != nil {
		return err
	}
	b = append(r.event(eventResponseIncomplete), `,"response":`...)
	return r.send(eventResponseIncomplete, append(r.response(b, &text, &u), '}'))
}

func (r *responsesWriter) whole(text string, u tokenUsage) error {
	return writeWhole(r.w, append(r.response(nil, &text, &u), '\n'))
}
