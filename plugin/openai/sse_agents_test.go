package openai

import (
	"strings"
	"testing"
)

// sse frames event lines as a server sends them: "event: name" (Messages and
// Responses streams name each event), "data: json", a blank line.
func sse(name, data string) string {
	if name != "" {
		return "event: " + name + "\ndata: " + data + "\n\n"
	}
	return "data: " + data + "\n\n"
}

// vllmMessagesStream is shaped like vLLM's /v1/messages stream
// (vllm/entrypoints/anthropic/serving.py): message_start with the prompt's
// usage, a text block, message_delta with the usage, message_stop.
var vllmMessagesStream = sse("message_start", `{"type":"message_start","message":{"id":"chatcmpl-1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":0}}}`) +
	sse("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
	sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}`) +
	sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo \"x\""}}`) +
	sse("content_block_stop", `{"type":"content_block_stop","index":0}`) +
	sse("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":12,"output_tokens":2}}`) +
	sse("message_stop", `{"type":"message_stop"}`)

// anthropicMessagesStream is shaped like Anthropic's own: the cache's counts
// in message_start, thinking before the text, ping, the output count alone
// in message_delta.
var anthropicMessagesStream = sse("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":2048,"output_tokens":1}}}`) +
	sse("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`) +
	sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me see."}}`) +
	sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}`) +
	sse("content_block_stop", `{"type":"content_block_stop","index":0}`) +
	sse("ping", `{"type":"ping"}`) +
	sse("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`) +
	sse("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Paris."}}`) +
	sse("content_block_stop", `{"type":"content_block_stop","index":1}`) +
	sse("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}}`) +
	sse("message_stop", `{"type":"message_stop"}`)

// responsesStream is shaped like the Responses API's stream (OpenAI's
// event types, vLLM's field order for the deltas).
var responsesStream = sse("response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null}}`) +
	sse("response.output_item.added", `{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}`) +
	sse("response.reasoning_text.delta", `{"content_index":0,"delta":"hm","item_id":"rs_1","output_index":0,"sequence_number":2,"type":"response.reasoning_text.delta"}`) +
	sse("response.output_item.added", `{"type":"response.output_item.added","sequence_number":3,"output_index":1,"item":{"type":"message","id":"msg_1","role":"assistant","status":"in_progress","content":[]}}`) +
	sse("response.output_text.delta", `{"content_index":0,"delta":"Hel","item_id":"msg_1","logprobs":[],"output_index":1,"sequence_number":4,"type":"response.output_text.delta"}`) +
	sse("response.output_text.delta", `{"content_index":0,"delta":"lo","item_id":"msg_1","logprobs":[],"output_index":1,"sequence_number":5,"type":"response.output_text.delta"}`) +
	sse("response.output_text.done", `{"content_index":0,"item_id":"msg_1","output_index":1,"sequence_number":6,"text":"Hello","type":"response.output_text.done"}`) +
	sse("response.completed", `{"type":"response.completed","sequence_number":7,"response":{"id":"resp_1","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hello"}]}],`+
		`"usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":32},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":1},"total_tokens":43}}}`)

func TestStreamCounterAgents(t *testing.T) {
	tests := []struct {
		name   string
		stream string
		want   sseWant
		id     string // the response id, when the stream names one
	}{
		{name: "vllm messages", stream: vllmMessagesStream,
			want: sseWant{events: 7, deltas: 2, usageC: 2, usageP: 12, hasUsage: true, finished: true, done: true, tokens: 2}},
		{name: "anthropic messages with the cache", stream: anthropicMessagesStream,
			want: sseWant{events: 11, deltas: 2, usageC: 9, usageP: 2073, cached: 2048, hasUsage: true, hasCached: true, finished: true, done: true, tokens: 9}},
		{name: "messages prompt usage alone counts no output", stream: sse("", `{"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":1}}}`) +
			sse("", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`),
			want: sseWant{events: 2, deltas: 1, usageP: 5, tokens: 1}},
		{name: "responses", stream: responsesStream, id: "resp_1",
			want: sseWant{events: 8, deltas: 3, usageC: 3, usageP: 40, cached: 32, hasUsage: true, hasCached: true, finished: true, done: true, tokens: 3}},
		{name: "chat with cached tokens (vLLM --enable-prompt-tokens-details)", stream: sse("", `{"choices":[{"delta":{"content":"a"}}]}`) +
			sse("", `{"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":16}}}`) + "data: [DONE]\n\n",
			want: sseWant{events: 2, deltas: 1, usageC: 1, usageP: 30, cached: 16, hasUsage: true, hasCached: true, done: true, tokens: 1}},
		{name: "chat cached 0 is reported", stream: sse("", `{"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0}}}`),
			want: sseWant{events: 1, usageC: 1, usageP: 30, hasUsage: true, hasCached: true, tokens: 1}},
		{name: "chat without details (SGLang with nothing cached)", stream: sse("", `{"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":1,"prompt_tokens_details":null}}`),
			want: sseWant{events: 1, usageC: 1, usageP: 30, hasUsage: true, tokens: 1}},
		{name: "typed fields of an untyped event are not read", stream: sse("", `{"message":{"usage":{"input_tokens":5}},"response":{"id":"r","usage":{"output_tokens":3}},"delta":"x"}`),
			want: sseWant{events: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, template := range []bool{true, false} {
				c := StreamCounter{noTemplate: !template}
				writeChunks(&c, []byte(tt.stream), 13)
				if got := counts(&c); got != tt.want {
					t.Errorf("StreamCounter(%s, template %v) = %+v, want %+v", tt.name, template, got, tt.want)
				}
				if wantID := tt.id != ""; c.HasResponseID != wantID || wantID && c.ResponseID != fnv64([]byte(tt.id)) {
					t.Errorf("StreamCounter(%s).ResponseID = %#x, %v; want the hash of %q", tt.name, c.ResponseID, c.HasResponseID, tt.id)
				}
			}
		})
	}
}

func TestParseUsageFields(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Usage
		ok   bool
	}{
		{name: "vllm with details", body: `{"usage":{"prompt_tokens":50,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":32}}}`,
			want: Usage{PromptTokens: 50, CompletionTokens: 5, CachedTokens: 32, HasCached: true}, ok: true},
		{name: "details null", body: `{"usage":{"prompt_tokens":50,"completion_tokens":5,"prompt_tokens_details":null}}`,
			want: Usage{PromptTokens: 50, CompletionTokens: 5}, ok: true},
		{name: "responses", body: `{"id":"resp_1","usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":8},"output_tokens":3,"total_tokens":43}}`,
			want: Usage{PromptTokens: 40, CompletionTokens: 3, CachedTokens: 8, HasCached: true}, ok: true},
		{name: "messages with the cache", body: `{"usage":{"input_tokens":25,"cache_creation_input_tokens":10,"cache_read_input_tokens":2048,"output_tokens":9}}`,
			want: Usage{PromptTokens: 2083, CompletionTokens: 9, CachedTokens: 2048, HasCached: true}, ok: true},
		{name: "messages without the cache (vLLM before #40912)", body: `{"usage":{"input_tokens":25,"output_tokens":9}}`,
			want: Usage{PromptTokens: 25, CompletionTokens: 9}, ok: true},
		{name: "sums saturate", body: `{"usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":9,"output_tokens":1}}`,
			want: Usage{PromptTokens: 9223372036854775807, CompletionTokens: 1, CachedTokens: 9, HasCached: true}, ok: true},
		{name: "bad cached ignored", body: `{"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":-2}}}`,
			want: Usage{PromptTokens: 5, CompletionTokens: 1}, ok: true},
		{name: "no completion count", body: `{"usage":{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":2}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseUsage([]byte(tt.body))
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseUsage(%q) = %+v, %v, want %+v, %v", tt.body, got, ok, tt.want, tt.ok)
			}
			var c StreamCounter
			if r := c.Reply([]byte(tt.body)); r.HasUsage != tt.ok || tt.ok && r.Usage != tt.want {
				t.Errorf("Reply(%q) usage = %+v, %v, want %+v, %v", tt.body, r.Usage, r.HasUsage, tt.want, tt.ok)
			}
		})
	}
}

// TestStreamTemplateMessages: a Messages stream's text deltas, alike but
// for their text, are counted from the template.
func TestStreamTemplateMessages(t *testing.T) {
	event := func(text string) string {
		return sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+text+`"}}`)
	}
	var c StreamCounter
	c.Write([]byte(event("Hello")))
	if !c.tmplOK {
		t.Fatal("no template after a Messages text delta")
	}
	if n, _, _ := c.templateEvent([]byte(strings.TrimPrefix(event(" world"), "event: content_block_delta\n"))); n == 0 {
		t.Error("templateEvent declined the next text delta")
	}
}
