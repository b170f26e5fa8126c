package openai

import (
	"bytes"
	"strings"
	"testing"
)

// vllmChatStream is shaped like vLLM's /v1/chat/completions stream with
// stream_options.include_usage: a role-only first event, one event per token,
// a finish event, a usage event with empty choices, and [DONE].
const vllmChatStream = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n" +
	"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n" +
	"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\\"x\\\"\"},\"finish_reason\":null}]}\n\n" +
	"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"},\"finish_reason\":null}]}\n\n" +
	"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\"}}]}}]}\n\n" +
	"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}\n\n" +
	"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":18,\"completion_tokens\":6}}\n\n" +
	"data: [DONE]\n\n"

type sseWant struct {
	events, deltas, oversized int
	usageC, usageP, cached    int64
	hasUsage, hasCached       bool
	finished, done            bool
	tokens                    int64
}

func counts(c *StreamCounter) sseWant {
	return sseWant{c.Events, c.ContentDeltas, c.Oversized, c.UsageCompletionTokens, c.UsagePromptTokens,
		c.UsageCachedTokens, c.HasUsage, c.HasCached, c.Finished, c.Done, c.Tokens()}
}

func TestStreamCounter(t *testing.T) {
	big := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", MaxLineBytes) + "\"}}]}\n\n"
	tests := []struct {
		name   string
		stream string
		want   sseWant
	}{
		{name: "vllm chat with usage", stream: vllmChatStream,
			want: sseWant{events: 7, deltas: 4, usageC: 6, usageP: 12, hasUsage: true, finished: true, done: true, tokens: 6}},
		{name: "tgi no space crlf", stream: "data:{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\ndata:{\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"length\"}]}\r\n\r\ndata:[DONE]\r\n\r\n",
			want: sseWant{events: 2, deltas: 2, finished: true, done: true, tokens: 2}},
		{name: "completions text", stream: "data: {\"choices\":[{\"text\":\"a\"},{\"text\":\"b\",\"index\":1}]}\n\ndata: {\"choices\":[{\"text\":\"\"}]}\n\n",
			want: sseWant{events: 2, deltas: 2, tokens: 2}},
		{name: "comments and fields ignored", stream: ": ping\n\nevent: message\nid: 3\nretry: 10\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
			want: sseWant{events: 1, deltas: 1, tokens: 1}},
		{name: "continuous usage keeps max", stream: "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"completion_tokens\":1,\"prompt_tokens\":3}}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"usage\":{\"completion_tokens\":2,\"prompt_tokens\":3}}\n\n",
			want: sseWant{events: 2, deltas: 2, usageC: 2, usageP: 3, hasUsage: true, tokens: 2}},
		{name: "garbage data", stream: "data: {not json\n\ndata: 42\n\n",
			want: sseWant{events: 2}},
		{name: "oversized event skipped", stream: big + vllmChatStream,
			want: sseWant{events: 8, deltas: 5, oversized: 1, usageC: 6, usageP: 12, hasUsage: true, finished: true, done: true, tokens: 6}},
		{name: "tool call then finish", stream: "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0},{\"index\":1}],\"content\":\"\"},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"completion_tokens\":4}}\n\n",
			want: sseWant{events: 1, deltas: 1, finished: true, usageC: 4, hasUsage: true, tokens: 4}},
		{name: "escaped key read by the walk", stream: "data: {\"choi\\u0063es\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
			want: sseWant{events: 1, deltas: 1, tokens: 1}},
		{name: "unterminated last line", stream: "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}",
			want: sseWant{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c StreamCounter
			c.Write([]byte(tt.stream))
			if got := counts(&c); got != tt.want {
				t.Errorf("StreamCounter(%.60q) = %+v, want %+v", tt.stream, got, tt.want)
			}
		})
	}
}

// TestStreamCounterSplits feeds each stream split at every byte boundary (in
// two chunks, and one byte at a time) and expects the same counts.
func TestStreamCounterSplits(t *testing.T) {
	big := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("y", MaxLineBytes-40) + "\"}}]}\n\n"
	for _, stream := range []string{vllmChatStream, big + vllmChatStream} {
		var whole StreamCounter
		whole.Write([]byte(stream))
		want := counts(&whole)
		b := []byte(stream)
		var c StreamCounter
		for i := 0; i <= len(b); i++ {
			c.Reset()
			c.Write(b[:i])
			c.Write(b[i:])
			if got := counts(&c); got != want {
				t.Fatalf("StreamCounter split at %d = %+v, want %+v", i, got, want)
			}
		}
		c.Reset()
		for i := range b {
			c.Write(b[i : i+1])
		}
		if got := counts(&c); got != want {
			t.Fatalf("StreamCounter byte by byte = %+v, want %+v", got, want)
		}
	}
}

func TestParseUsage(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Usage
		ok   bool
	}{
		{name: "vllm", body: `{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2}}`,
			want: Usage{PromptTokens: 5, CompletionTokens: 2}, ok: true},
		{name: "no usage", body: `{"choices":[{"usage":{"completion_tokens":3}}]}`},
		{name: "null usage", body: `{"usage":null}`},
		{name: "negative", body: `{"usage":{"completion_tokens":-1}}`},
		{name: "not json", body: `<html>`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseUsage([]byte(tt.body))
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseUsage(%q) = %+v, %v, want %+v, %v", tt.body, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// FuzzSSEFastPath holds fastEvent to the jsonx walk: whenever it accepts an
// event, what it counts (the answer's text span included) is the walk's.
func FuzzSSEFastPath(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{"choices":[{"delta":{"content":"lo \"x\" \u00e9"},"finish_reason":"stop"}],"usage":null}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"text":"a"},{"text":"","index":1},7,[]],"usage":{"prompt_tokens":12,"total_tokens":18,"completion_tokens":6}}`,
		`{"usage":{"completion_tokens":-1,"prompt_tokens":1.5e3},"usage":{"completion_tokens":3}}`,
		` { "choices" : [ { "delta" : { "reasoning" : "r" } } ] } trailing`,
		`{"choices":[{"delta":{"content":"a"}}],}`,
		`{"choi\u0063es":[{"delta":{"content":"a"}}]}`,
		`{"choices":[{"delta":{"content":"a` + "\x01" + `"}}]}`,
		`{"x":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}`,
		`{"x":-0.5e+7,"y":01,"z":nul}`,
		`{"choices":[{"index":1,"delta":{"content":"b"}},{"delta":{"content":"a","content":"c"},"index":0}]}`,
		`{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":4,"x":[1]},"input_tokens_details":null}}`,
		`{"usage":{"input_tokens":3,"cache_read_input_tokens":5,"cache_creation_input_tokens":1,"output_tokens":2}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, event string) {
		var ev, want eventCounts
		if !fastEvent([]byte(event), &ev) {
			return
		}
		var slow StreamCounter
		if slow.walkEvent([]byte(event), &want); ev != want {
			t.Fatalf("fastEvent(%q) = %+v, want %+v (jsonx walk)", event, ev, want)
		}
	})
}

// TestFastEventTakes checks that the events servers send take the fast path.
func TestFastEventTakes(t *testing.T) {
	for _, line := range strings.Split(vllmChatStream, "\n") {
		event, ok := strings.CutPrefix(line, "data: ")
		if !ok || event == "[DONE]" {
			continue
		}
		var ev eventCounts
		if !fastEvent([]byte(event), &ev) {
			t.Errorf("fastEvent(%q) declined a server's event", event)
		}
	}
}

// TestStreamTemplate: an event alike the last counted one but for its
// text's contents is counted from the template; one that differs anywhere
// else, or whose new contents are empty or not a valid string, is walked.
func TestStreamTemplate(t *testing.T) {
	const head = `{"id":"c","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"`
	const tail = `"},"logprobs":null,"finish_reason":null}]}`
	tests := []struct {
		name  string
		event string
		hit   bool
	}{
		{name: "other text", event: head + "world" + tail, hit: true},
		{name: "escaped text", event: head + `a \"q\" \u00e9\n` + tail, hit: true},
		{name: "empty text", event: head + tail},
		{name: "quote in text", event: head + `a"b` + tail},
		{name: "bad escape", event: head + `a\qb` + tail},
		{name: "control byte", event: head + "a\x01b" + tail},
		{name: "another id", event: strings.Replace(head, `"c"`, `"d"`, 1) + "x" + tail},
		{name: "finished", event: head + "x" + strings.Replace(tail, "null}", `"stop"}`, 1)},
		{name: "with usage", event: head + "x" + strings.TrimSuffix(tail, "}") + `,"usage":{"completion_tokens":3}}`},
		{name: "cut", event: head + "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c StreamCounter
			c.Write([]byte("data: " + head + "Hello" + tail + "\n\n"))
			if !c.tmplOK {
				t.Fatal("no template after a plain token event")
			}
			if got := c.fromTemplate([]byte(tt.event)); got != tt.hit {
				t.Fatalf("fromTemplate(%q) = %v, want %v", tt.event, got, tt.hit)
			}
		})
	}
}

// FuzzStreamTemplate: a stream reads the same with templates as with every
// event walked, the answer recorded included.
func FuzzStreamTemplate(f *testing.F) {
	f.Add(vllmChatStream, uint16(7))
	tok := func(text, finish string) string {
		return `data: {"id":"c","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"` + text +
			`"},"finish_reason":` + finish + "}]}\n\n"
	}
	f.Add(tok("a", "null")+tok("b", "null")+tok("", "null")+tok(`\"`, "null")+tok("c", `"stop"`)+"data: [DONE]\n\n", uint16(5))
	f.Add(tok("a", "null")+tok("b\"", "null")+tok(`b\u00`, "null")+tok("d", "null"), uint16(64))
	f.Add("data: {\"choices\":[{\"text\":\"a\"},{\"text\":\"\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"},{\"text\":\"\"}]}\n\n"+
		"data: {\"choices\":[{\"text\":\"b\"},{\"text\":\"c\"}]}\n\n", uint16(3))
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"a\",\"tool_calls\":[{}]}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\",\"tool_calls\":[{}]}}]}\n\n", uint16(9))
	f.Add(vllmMessagesStream, uint16(1023))
	f.Add(anthropicMessagesStream, uint16(40))
	f.Add(responsesStream, uint16(2))
	f.Fuzz(func(t *testing.T, stream string, split uint16) {
		var fast, walked StreamCounter
		var fastRec, walkedRec bytes.Buffer
		walked.noTemplate = true
		kind := Kind(split>>10%4 + 1)
		fast.Record(kind, &fastRec)
		walked.Record(kind, &walkedRec)
		b := []byte(stream)
		step := int(split%1024) + 1 // whole events in a chunk too (templateEvent)
		for i := 0; i < len(b); i += step {
			fast.Write(b[i:min(i+step, len(b))])
			walked.Write(b[i:min(i+step, len(b))])
		}
		if got, want := readOf(&fast, &fastRec), readOf(&walked, &walkedRec); got != want {
			t.Fatalf("StreamCounter(%q) with templates = %+v, walking every event %+v", stream, got, want)
		}
	})
}
