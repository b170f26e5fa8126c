package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// responseWriter renders OpenAI completion responses: SSE chunks
// ("chat.completion.chunk" or streamed "text_completion" objects, each a
// `data:` event, ended by `data: [DONE]`) or one JSON body, following the
// OpenAI API reference for chat completions and completions.
type responseWriter struct {
	sse
	chat         bool
	includeUsage bool // stream_options.include_usage: a usage chunk before [DONE]
	id           string
	model        string
	created      int64
}

var _ answerWriter = (*responseWriter)(nil)

// answerWriter renders one endpoint's answer to a request the engine runs:
// streamed (start once the first token is out, token for each, end after
// the last) or whole.
type answerWriter interface {
	start(u tokenUsage) error
	token(text string, first bool) error
	end(text string, u tokenUsage) error
	whole(text string, u tokenUsage) error
}

// tokenUsage is a request's token accounting: Prompt tokens, Cached of them
// served from the prefix cache, Output tokens generated.
type tokenUsage struct {
	Prompt, Cached, Output int
}

// sse writes server-sent events to w, flushing each.
type sse struct {
	w   http.ResponseWriter
	buf []byte
}

// send writes one event: an "event: name" line unless name is empty, then
// "data: b". The Messages and Responses APIs name every event; chat and
// completions streams are data lines only.
func (s *sse) send(name string, b []byte) error {
	s.buf = s.buf[:0]
	if name != "" {
		s.buf = append(append(append(s.buf, "event: "...), name...), '\n')
	}
	s.buf = append(append(append(s.buf, "data: "...), b...), "\n\n"...)
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

// writeWhole sends a non-streamed JSON body.
func writeWhole(w http.ResponseWriter, b []byte) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, err := w.Write(b)
	return err
}

func (o *responseWriter) object(stream bool) string {
	switch {
	case o.chat && stream:
		return "chat.completion.chunk"
	case o.chat:
		return "chat.completion"
	}
	return "text_completion"
}

// head appends the fields every response object starts with.
func (o *responseWriter) head(b []byte, stream bool) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendQuote(b, o.id)
	b = append(b, `,"object":"`...)
	b = append(b, o.object(stream)...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, o.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, o.model)
	return b
}

// choice appends one choice carrying text; finish "" is JSON null.
func (o *responseWriter) choice(b []byte, text string, first, stream bool, finish string) []byte {
	b = append(b, `{"index":0,`...)
	switch {
	case o.chat && stream:
		b = append(b, `"delta":{`...)
		if first {
			b = append(b, `"role":"assistant",`...)
		}
		b = append(b, `"content":`...)
		b = appendJSONString(b, text)
		b = append(b, '}')
	case o.chat:
		b = append(b, `"message":{"role":"assistant","content":`...)
		b = appendJSONString(b, text)
		b = append(b, '}')
	default:
		b = append(b, `"text":`...)
		b = appendJSONString(b, text)
	}
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendQuote(b, finish)
	}
	return append(b, '}')
}

// chunk appends one streamed choice (the closing one with finish set).
func (o *responseWriter) chunk(text string, first bool, finish string) []byte {
	b := o.head(nil, true)
	b = append(b, `,"choices":[`...)
	b = o.choice(b, text, first, true, finish)
	return append(b, "]}"...)
}

// start sends nothing: a chat or completions stream has no head event.
func (o *responseWriter) start(tokenUsage) error { return nil }

// token sends one streamed token.
func (o *responseWriter) token(text string, first bool) error {
	return o.send("", o.chunk(text, first, ""))
}

// end sends the closing chunk, the stream_options.include_usage chunk (no
// choices, usage set) when asked for, and [DONE].
func (o *responseWriter) end(_ string, u tokenUsage) error {
	if err := o.send("", o.chunk("", false, finishLength)); err != nil {
		return err
	}
	if o.includeUsage {
		b := o.head(nil, true)
		b = append(b, `,"choices":[],"usage":`...)
		b = appendUsage(b, u)
		if err := o.send("", append(b, '}')); err != nil {
			return err
		}
	}
	return o.send("", []byte("[DONE]"))
}

// whole sends a non-streamed response.
func (o *responseWriter) whole(text string, u tokenUsage) error {
	b := o.head(nil, false)
	b = append(b, `,"choices":[`...)
	b = o.choice(b, text, true, false, finishLength)
	b = append(b, `],"usage":`...)
	b = appendUsage(b, u)
	return writeWhole(o.w, append(b, "}\n"...))
}

// finishLength is the finish_reason of an answer that reached its
// max_tokens, as every simulated answer does.
const finishLength = "length"

// appendUsage appends the usage object as vLLM renders it with prompt
// token details enabled (--enable-prompt-tokens-details): the prompt tokens
// served from the prefix cache are prompt_tokens_details.cached_tokens.
func appendUsage(b []byte, u tokenUsage) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.Prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.Prompt+u.Output), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.Output), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(u.Cached), 10)
	return append(b, "}}"...)
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// openAIError answers with OpenAI's error object ({"error":{"message",
// "type","code"}}), which the openai clients turn into typed exceptions.
func openAIError(w http.ResponseWriter, status int, msg string) {
	b := []byte(`{"error":{"message":`)
	b = appendJSONString(b, msg)
	b = append(b, `,"type":"invalid_request_error","code":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, "}}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
