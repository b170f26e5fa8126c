package openai

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// routerBody builds a body shaped like plugin/router's BenchmarkRequestPath64
// traffic: encoding/json's output of a map (keys sorted, so "content" comes
// before "role" and "model" after "messages"), a ~30 KB system prompt with a
// ".\n" escape every 13 words, and a 1 KB question.
func routerBody() []byte {
	words := strings.Fields("the replica cache prefix token model request queue batch decode prefill " +
		"kernel tensor adapter memory latency throughput schedule policy context window answer tool")
	var s strings.Builder
	s.WriteString("You are assistant 0. Follow the policy below.\n")
	for i := 0; s.Len() < 30<<10; i++ {
		s.WriteString(words[(i*7)%len(words)])
		if i%13 == 12 {
			s.WriteString(".\n")
		} else {
			s.WriteByte(' ')
		}
	}
	var q strings.Builder
	q.WriteString("Question 0: ")
	for j := 0; q.Len() < 1024; j++ {
		q.WriteString(words[(j*5)%len(words)] + " ")
	}
	b, err := json.Marshal(map[string]any{
		"model": "meta-llama/Llama-3.1-8B-Instruct",
		"messages": []map[string]string{
			{"role": "system", "content": s.String()},
			{"role": "user", "content": q.String()},
		},
		"max_tokens": 256,
		"stream":     true,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkParseTextRouter is the plugin's body step on the router
// benchmark's body: ParseText into the prefix hasher as plugin/router
// configures it (64-char blocks), then the seed. "count" writes into a
// counter instead, to separate the parse from the hashing.
func BenchmarkParseTextRouter(b *testing.B) {
	body := routerBody()
	b.Run("hasher", func(b *testing.B) { benchParseTextHashed(b, body) })
	b.Run("count", func(b *testing.B) { benchParseTextCounted(b, body) })
	b.Run("memo", func(b *testing.B) {
		// The router's writer: the system message is replayed from the
		// memo (remembered by a first parse, before the timed ones), the
		// question decoded.
		var p Parser
		var req Request
		var m prefix.Memo
		h := routerHasher()
		m.Init(h, 0, 0, 0)
		h.ResetDeferred()
		p.ParseText(Chat, body, false, &m, &req)
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			h.ResetDeferred()
			p.ParseText(Chat, body, false, &m, &req)
			h.SetSeed(string(req.Model), "")
		}
		if m.Replays() == 0 {
			b.Fatal("the memo replayed nothing")
		}
	})
	b.Run("hashonly", func(b *testing.B) {
		// The hasher alone over the same text, in 2 KB writes.
		var p Parser
		var req Request
		var text strings.Builder
		p.ParseText(Chat, body, false, &text, &req)
		t := []byte(text.String())
		h := routerHasher()
		b.ReportAllocs()
		b.SetBytes(int64(len(t)))
		for b.Loop() {
			h.ResetDeferred()
			for i := 0; i < len(t); i += 2048 {
				h.Write(t[i:min(i+2048, len(t))])
			}
		}
	})
}

// agentBody builds a chat body of n messages of ~400 bytes each, as agents
// and multi-turn chats send them: a system prompt, then user and assistant
// turns alternating, every fifth user turn a content-part array (text and
// an image), every fourth assistant turn a tool call answered by a "tool"
// message, role first and compact, as the OpenAI SDKs serialize.
func agentBody(n int) []byte {
	const text = `Step %d: check the replica queue depth, then compare the prefix cache hit rate with the decode batch; ` +
		`report \"latency\" per token and the adapter in use, with the scheduler's policy.\nKeep answers short and exact. `
	const short = `Check the queue depth on r1 and report \"latency\" per token.\nThen the cache hit rate.`
	turn := func(i int) string {
		return strings.Replace(strings.Repeat(text, 2), "%d", strings.Repeat("7", i%3+1), -1)
	}
	var s strings.Builder
	s.WriteString(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"max_tokens":512,"messages":[`)
	s.WriteString(`{"role":"system","content":"` + turn(0) + `"}`)
	for i := 1; i < n; i++ {
		s.WriteByte(',')
		switch {
		case i%2 == 1 && i%10 == 1:
			s.WriteString(`{"role":"user","content":[{"type":"text","text":"` + short +
				`"},{"type":"image_url","image_url":{"url":"https://example.com/q.png"}}]}`)
		case i%2 == 1:
			s.WriteString(`{"role":"user","content":"` + turn(i) + `"}`)
		case i%8 == 2:
			s.WriteString(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_` + strings.Repeat("x", i%5+1) +
				`","type":"function","function":{"name":"queue_depth","arguments":"{\"replica\":\"r1\"}"}}]}`)
			if i+1 < n {
				i++
				s.WriteString(`,{"role":"tool","tool_call_id":"call_x","content":"` + short + `"}`)
			}
		default:
			s.WriteString(`{"role":"assistant","content":"` + turn(i) + `"}`)
		}
	}
	s.WriteString(`]}`)
	return []byte(s.String())
}

// userMessages builds a chat body of n user messages with the same content.
func userMessages(n int, content string) []byte {
	var s strings.Builder
	s.WriteString(`{"model":"m","messages":[`)
	for i := range n {
		if i > 0 {
			s.WriteByte(',')
		}
		s.WriteString(`{"role":"user","content":"` + content + `"}`)
	}
	s.WriteString(`]}`)
	return []byte(s.String())
}

// BenchmarkParseTextMessages is the per-message cost: ParseText into the
// prefix hasher (as BenchmarkParseTextRouter) on 75 short messages, both
// uniform ({"role":"user","content":"..."} only, and in encoding/json's
// order for a map, content first) and agent traffic (agentBody: content
// arrays, tool calls, tool results).
func BenchmarkParseTextMessages(b *testing.B) {
	line := strings.Repeat(`SELECT name FROM t WHERE id = 42;  `, 12)
	for _, bc := range []struct {
		name string
		body []byte
	}{
		{name: "uniform75", body: userMessages(75, line)},
		{name: "sorted75", body: bytes.ReplaceAll(userMessages(75, line),
			[]byte(`{"role":"user","content":"`+line+`"}`), []byte(`{"content":"`+line+`","role":"user"}`))},
		{name: "agent75", body: agentBody(75)},
	} {
		b.Run(bc.name, func(b *testing.B) { benchParseTextHashed(b, bc.body) })
	}
}

// routerHasher is a prefix hasher as plugin/router configures it: 64-char
// blocks, room for a 1 MB body.
func routerHasher() *prefix.Hasher {
	h := new(prefix.Hasher)
	h.Init(prefix.DefaultBlockChars, (1<<20)/prefix.DefaultBlockChars)
	return h
}

// benchParseTextHashed runs the plugin's body step on a chat body: ParseText
// into the router's prefix hasher, then the seed.
func benchParseTextHashed(b *testing.B, body []byte) {
	var p Parser
	var req Request
	h := routerHasher()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		h.ResetDeferred()
		p.ParseText(Chat, body, false, h, &req)
		h.SetSeed(string(req.Model), "")
	}
}

// benchParseTextCounted runs ParseText on a chat body into a byte counter:
// the parse without the hashing.
func benchParseTextCounted(b *testing.B, body []byte) {
	var p Parser
	var req Request
	var w countWriter
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		p.ParseText(Chat, body, false, &w, &req)
	}
}

// agentBodies are about 32 KB bodies of the Messages and Responses APIs as
// their Python SDKs order the keys (the prompt before the system prompt,
// which ParseText then reads again from its offset): routerBody's system
// prompt and question.
func agentBodies() (messages, responses []byte) {
	var chat struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	if err := json.Unmarshal(routerBody(), &chat); err != nil {
		panic(err)
	}
	system, question := chat.Messages[0].Content, chat.Messages[1].Content
	m, _ := json.Marshal(map[string]any{"model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 256, "stream": true,
		"system": system, "messages": []map[string]string{{"role": "user", "content": question}}})
	r, _ := json.Marshal(map[string]any{"model": "meta-llama/Llama-3.1-8B-Instruct", "max_output_tokens": 256, "stream": true,
		"instructions": system, "input": question})
	return m, r
}

// BenchmarkParseTextAgents is BenchmarkParseTextRouter's "hasher" for the
// Messages and Responses APIs.
func BenchmarkParseTextAgents(b *testing.B) {
	messages, responses := agentBodies()
	for _, bc := range []struct {
		name string
		kind Kind
		body []byte
	}{{"messages", Messages, messages}, {"responses", Responses, responses}} {
		b.Run(bc.name, func(b *testing.B) {
			var p Parser
			var req Request
			h := routerHasher()
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				h.ResetDeferred()
				p.ParseText(bc.kind, bc.body, false, h, &req)
				h.SetSeed(string(req.Model), "")
			}
		})
	}
}

// BenchmarkStreamCounterRecord is a streamed token event of each endpoint
// as a chunk of its own, its text recorded as the router records it: the
// VM's answer hasher resumed from the stream's continuation and saved
// after the chunk.
func BenchmarkStreamCounterRecord(b *testing.B) {
	for _, bc := range []struct {
		name  string
		kind  Kind
		event string
	}{
		{"chat", Chat, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1730000000,` +
			`"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" token"},` +
			`"logprobs":null,"finish_reason":null}]}` + "\n\n"},
		{"messages", Messages, "event: content_block_delta\n" +
			`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" token"}}` + "\n\n"},
		// Each event's sequence_number is its own, so the template never
		// matches and every event is walked: two alternate.
		{"responses", Responses, "event: response.output_text.delta\n" +
			`data: {"content_index":0,"delta":" token","item_id":"msg_1","logprobs":[],"output_index":0,"sequence_number":7,"type":"response.output_text.delta"}` + "\n\n"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			event := []byte(bc.event)
			next := bytes.Replace(event, []byte(`"sequence_number":7`), []byte(`"sequence_number":8`), 1)
			h := routerHasher()
			h.Reset("m", "")
			h.Write([]byte("a prompt of some length"))
			var cont prefix.Continuation
			h.Save(&cont)
			c := new(StreamCounter)
			c.Record(bc.kind, h)
			c.Write(event)
			b.ReportAllocs()
			b.SetBytes(int64(len(event)))
			for b.Loop() {
				h.Resume(&cont)
				c.Write(event)
				h.Save(&cont)
				event, next = next, event
			}
			if c.ContentDeltas < b.N {
				b.Fatalf("counted %d tokens in %d events", c.ContentDeltas, b.N+1)
			}
		})
	}
}
