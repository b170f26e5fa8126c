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
	w       http.ResponseWriter
	chat    bool
	id      string
	model   string
	created int64
	buf     []byte
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

func (o *responseWriter) event(b []byte) error {
	o.buf = append(append(append(o.buf[:0], "data: "...), b...), "\n\n"...)
	if _, err := o.w.Write(o.buf); err != nil {
		return err
	}
	if f, ok := o.w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

// chunk sends one streamed token (or the closing chunk with finish set).
func (o *responseWriter) chunk(text string, first bool, finish string) error {
	b := o.head(nil, true)
	b = append(b, `,"choices":[`...)
	b = o.choice(b, text, first, true, finish)
	b = append(b, "]}"...)
	return o.event(b)
}

// usage sends the stream_options.include_usage chunk: no choices, usage set.
func (o *responseWriter) usage(usage []byte) error {
	b := o.head(nil, true)
	b = append(b, `,"choices":[],"usage":`...)
	b = append(b, usage...)
	b = append(b, '}')
	return o.event(b)
}

func (o *responseWriter) done() error {
	return o.event([]byte("[DONE]"))
}

// whole sends a non-streamed response.
func (o *responseWriter) whole(text, finish string, usage []byte) error {
	b := o.head(nil, false)
	b = append(b, `,"choices":[`...)
	b = o.choice(b, text, true, false, finish)
	b = append(b, `],"usage":`...)
	b = append(b, usage...)
	b = append(b, "}\n"...)
	o.w.Header().Set("Content-Type", "application/json")
	o.w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, err := o.w.Write(b)
	return err
}

// usageJSON renders the usage object as vLLM does with prompt token details
// enabled (--enable-prompt-tokens-details): cached is the prompt tokens
// served from the prefix cache, in prompt_tokens_details.cached_tokens.
func usageJSON(prompt, completion, cached int) []byte {
	b := []byte(`{"prompt_tokens":`)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt+completion), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(cached), 10)
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
