package openai

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// chatBody builds a chat body of about size bytes: a system prompt and
// alternating turns with escapes, as agents send them.
func chatBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"meta-llama/Llama-3.1-8B-Instruct:sql","stream":true,"max_tokens":256,"messages":[`)
	b.WriteString(`{"role":"system","content":"You are a helpful assistant.\nAnswer in \"SQL\" only. \u00e9\ud83d\ude00"}`)
	turn := 0
	for b.Len() < size-200 {
		role := "user"
		if turn%2 == 1 {
			role = "assistant"
		}
		b.WriteString(`,{"role":"` + role + `","content":"`)
		b.WriteString(strings.Repeat(`SELECT name FROM t WHERE id = 42;\n`, 12))
		b.WriteString(`"}`)
		turn++
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

type countWriter struct{ n int }

func (w *countWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }

// parsed is one ParseText's outcome, copied out of the Parser.
type parsed struct {
	req    Request
	text   string
	err    string
	code   Code
	system int // Parser.systemChars
}

func parseCopy(p *Parser, kind Kind, body []byte, truncated bool) parsed {
	var buf bytes.Buffer
	var out parsed
	err := p.ParseText(kind, body, truncated, &buf, &out.req)
	out.req.Model = bytes.Clone(out.req.Model)
	out.text = buf.String()
	if err != nil {
		out.err, out.code = err.Error(), p.err.Code
	}
	out.system = p.systemChars
	return out
}

// syntax reports a failure for which the text written is to be discarded.
func syntax(c Code) bool { return c == CodeNotJSON || c == CodeTooDeep || c == CodeTruncated }

// FuzzParseRequest: ParseText never panics, fails with an *Error, counts
// what it wrote, gives the same result again (the Parser reused), reads a
// complete body the same whether or not it may be cut, and writes for a cut
// body a prefix of the whole body's text.
func FuzzParseRequest(f *testing.F) {
	seeds := []string{
		`{"model":"m","prompt":"hi","max_tokens":3}`,
		`{"model":"m","prompt":[[1,2],[3]]}`,
		`{"model":"m","prompt":["a","b"]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a\u00e9\ud83d\ude00"},{"type":"image_url","image_url":{"url":"x"}}]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}],"stream":true}`,
		`{"model":"m","max_completion_tokens":1,"max_tokens":-1,"n":2,"stream_options":{"include_usage":true}}`,
		`{"model":"m","x":[[[[[[[[[[]]]]]]]]]]}`,
		"{\"model\":\"\xff\",\"prompt\":\"\xc3\"}",
		`{"model":"m","messages":[{"role":"user","content":"abc\ud83d`,
		`{"messages":[{"content":"a\"b","role":"user"},{"role":"a","content":"c","content":"d"}],"model":"m"}`,
	}
	for _, s := range seeds {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1|32<<2))
	}
	// mode bit 0: completions; bit 1: read as cut; bits 2-7: where the
	// prefix check cuts, in 63rds of the body.
	f.Fuzz(func(t *testing.T, body string, mode uint8) {
		kind := Chat
		if mode&1 == 1 {
			kind = Completion
		}
		checkParse(t, kind, []byte(body), mode)
	})
}

// FuzzParseMessages is FuzzParseRequest for the Anthropic Messages API.
func FuzzParseMessages(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":8,"system":"Be brief.","messages":[{"role":"user","content":"Hi"}]}`,
		`{"max_tokens":8,"messages":[{"content":"Hi","role":"user"}],"model":"m","system":[{"type":"text","text":"S"}]}`,
		`{"model":"m","max_tokens":8,"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"h"},{"type":"text","text":"a\u00e9"},` +
			`{"type":"tool_use","id":"t","name":"f","input":{"a":[1]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t",` +
			`"content":[{"type":"text","text":"r"},{"type":"image","source":{"data":"A"}},{"type":"tool_result","content":"x"}]}]}]}`,
		`{"model":"m","max_tokens":8,"system":[{"type":"text","text":"x-anthropic-billing-header: a"},{"type":"text","text":"S"}],"messages":[]}`,
		`{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"x-anthropic-billing-header: a"}]}],"system":"a","system":"b"}`,
	} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(2|20<<2))
	}
	f.Fuzz(func(t *testing.T, body string, mode uint8) { checkParse(t, Messages, []byte(body), mode) })
}

// FuzzParseResponses is FuzzParseRequest for the OpenAI Responses API.
func FuzzParseResponses(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","instructions":"Be brief.","input":"Hi","max_output_tokens":9,"previous_response_id":"resp_1"}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"Hi"},{"type":"input_image","image_url":"u"}]},` +
			`{"type":"function_call","call_id":"c","name":"f","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"c","output":"r"},` +
			`{"type":"reasoning","summary":[]},{"type":"item_reference","id":"x"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"o"}]}],` +
			`"instructions":"S","model":"m"}`,
		`{"model":"m","input":[{"output":[{"type":"input_text","text":"t"}],"type":"function_call_output"},{"name":"f","type":"function_call"}]}`,
		`{"model":"m","input":[{"type":"function_call","name":"f","name":"g","arguments":"a","arguments":"b","output":1}]}`,
	} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(2|40<<2))
	}
	f.Fuzz(func(t *testing.T, body string, mode uint8) { checkParse(t, Responses, []byte(body), mode) })
}

// checkParse holds ParseText of body as kind to its contract: it never
// panics, fails with an *Error, counts what it wrote, gives the same result
// again (the Parser reused), reads a complete body the same whether or not
// it may be cut, and writes for a cut body a prefix of the whole body's
// text. The one exception: a Messages or Responses body cut before its
// system prompt, which came after the prompt, writes the prompt without it.
// mode bit 1: read body as cut; bits 2-7: where the prefix check cuts, in
// 63rds of the body.
func checkParse(t *testing.T, kind Kind, b []byte, mode uint8) {
	t.Helper()
	var p Parser
	var req Request
	var w countWriter
	err := p.ParseText(kind, b, mode&2 == 2, &w, &req)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.Code == 0 {
			t.Fatalf("ParseText(%q) error %v is not an *Error", b, err)
		}
		_ = e.Error()
	}
	if err != nil && syntax(p.err.Code) {
		if req.PromptChars != 0 || req.PromptTokensExact != 0 {
			t.Fatalf("ParseText(%q) = %v with %d prompt chars, want 0", b, err, req.PromptChars)
		}
	} else if req.PromptChars != w.n {
		t.Fatalf("ParseText(%q).PromptChars = %d, want %d (bytes written)", b, req.PromptChars, w.n)
	}
	if req.PromptTokensExact < 0 || req.PromptTokensExact*4 > w.n {
		t.Fatalf("ParseText(%q).PromptTokensExact = %d with %d bytes", b, req.PromptTokensExact, w.n)
	}
	if req.HasMaxTokens && req.MaxTokens < 0 {
		t.Fatalf("ParseText(%q).MaxTokens = %d, want >= 0", b, req.MaxTokens)
	}
	whole := parseCopy(&p, kind, b, false)
	if again := parseCopy(&p, kind, b, false); !reflect.DeepEqual(again, whole) {
		t.Fatalf("ParseText(%q) = %+v, then %+v", b, whole, again)
	}
	if whole.err != "" && syntax(whole.code) {
		return
	}
	if asCut := parseCopy(&p, kind, b, true); !reflect.DeepEqual(asCut, whole) {
		t.Fatalf("ParseText(complete %q, truncated) = %+v, want %+v", b, asCut, whole)
	}
	n := len(b) * int(mode>>2) / 63
	part := parseCopy(&p, kind, b[:n], true)
	lostSystem := part.system == 0 && strings.HasPrefix(whole.text[whole.system:], part.text)
	if !strings.HasPrefix(whole.text, part.text) && !lostSystem {
		t.Fatalf("ParseText(%q cut at %d) = %q, not a prefix of %q", b, n, part.text, whole.text)
	}
}

// streamRead is what a StreamCounter made of a stream: its counts, its
// response id and the answer it recorded.
type streamRead struct {
	counts sseWant
	id     uint64
	hasID  bool
	answer string
	whole  bool
}

func readOf(c *StreamCounter, rec *bytes.Buffer) streamRead {
	_, whole := c.Answer()
	return streamRead{counts(c), c.ResponseID, c.HasResponseID, rec.String(), whole}
}

// FuzzSSE: a stream reads the same fed whole or in chunks of any size, and
// the counts never go down as it goes.
func FuzzSSE(f *testing.F) {
	f.Add(vllmChatStream, uint16(7))
	f.Add("data:{\"choices\":[{\"text\":\"a\"}]}\r\n\r\ndata: [DONE]\n\n", uint16(3))
	f.Add(": c\nevent: x\ndata: {\"usage\":{\"completion_tokens\":9}}\n\n", uint16(1))
	f.Add(vllmMessagesStream, uint16(11))
	f.Add(responsesStream, uint16(300))
	f.Fuzz(func(t *testing.T, stream string, split uint16) {
		var whole, parts StreamCounter
		var wholeRec, partsRec bytes.Buffer
		kind := Kind(split%4 + 1)
		whole.Record(kind, &wholeRec)
		parts.Record(kind, &partsRec)
		whole.Write([]byte(stream))
		b := []byte(stream)
		step := int(split%64) + 1
		prev := counts(&parts)
		for i := 0; i < len(b); i += step {
			parts.Write(b[i:min(i+step, len(b))])
			cur := counts(&parts)
			if cur.events < prev.events || cur.deltas < prev.deltas || cur.usageC < prev.usageC ||
				cur.usageP < prev.usageP || cur.cached < prev.cached || prev.done && !cur.done || prev.finished && !cur.finished {
				t.Fatalf("StreamCounter(%q) counts went down: %+v then %+v", stream, prev, cur)
			}
			prev = cur
		}
		if got, want := readOf(&parts, &partsRec), readOf(&whole, &wholeRec); got != want {
			t.Fatalf("StreamCounter(%q) in %d-byte chunks = %+v, want %+v", stream, step, got, want)
		}
	})
}

func TestParseTextAllocs(t *testing.T) {
	body := chatBody(32 << 10)
	var p Parser
	var req Request
	var w countWriter
	allocs := testing.AllocsPerRun(50, func() {
		if err := p.ParseText(Chat, body, false, &w, &req); err != nil {
			t.Fatal(err)
		}
		p.ParseText(Chat, body[:len(body)/2], true, &w, &req)
	})
	if allocs != 0 {
		t.Errorf("ParseText(32 KB chat, then cut) allocs = %v, want 0", allocs)
	}
	// Content before role: held in a buffer that, once grown, is reused.
	body = routerBody()
	allocs = testing.AllocsPerRun(50, func() {
		if err := p.ParseText(Chat, body, false, &w, &req); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("ParseText(32 KB chat, content before role) allocs = %v, want 0", allocs)
	}
}

func TestStreamCounterAllocs(t *testing.T) {
	b := []byte(vllmChatStream)
	c := new(StreamCounter)
	usage := []byte(`{"usage":{"completion_tokens":2}}`)
	allocs := testing.AllocsPerRun(100, func() {
		c.Reset()
		for i := 0; i < len(b); i += 17 {
			c.Write(b[i:min(i+17, len(b))])
		}
		ParseUsage(usage)
	})
	if allocs != 0 {
		t.Errorf("StreamCounter.Write allocs = %v, want 0", allocs)
	}
}

// BenchmarkParseTextChat32K is ParseText on a 32 KB chat body of short turns.
func BenchmarkParseTextChat32K(b *testing.B) { benchParseTextCounted(b, chatBody(32<<10)) }

func BenchmarkStreamCounter(b *testing.B) {
	stream := []byte(vllmChatStream)
	c := new(StreamCounter)
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		c.Reset()
		c.Write(stream)
	}
}

// BenchmarkParseTextShapes separates the per-message cost from the per-byte
// cost: about 32 KB of content in 2 messages (the router benchmark's
// shape: a long system prompt and a question) or in 75 (an agent's turns).
func BenchmarkParseTextShapes(b *testing.B) {
	body := userMessages
	const line = `SELECT name FROM t WHERE id = 42;  `
	for _, bc := range []struct {
		name string
		body []byte
	}{
		{name: "2msgs", body: body(2, strings.Repeat(line, 12*37))},
		{name: "75msgs", body: body(75, strings.Repeat(line, 12))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var p Parser
			var req Request
			var w countWriter
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				p.ParseText(Chat, bc.body, false, &w, &req)
			}
		})
	}
}

// FuzzMessagesFastPath holds fastMessages to the general walk (message):
// ParseText writes the same bytes, counts the same chars and fails alike
// with the fast path on and off, whole or cut.
func FuzzMessagesFastPath(f *testing.F) {
	long := strings.Repeat(`SELECT 1;\n`, 250)
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b\"c\u00e9"}]}`,
		`{"messages": [ {"role" : "user" , "content" : "a\ud83d\ude00" } ,{"role":"user","content":""}], "model":"m"}`,
		`{"model":"m","messages":[{"role":"us\u0065r","content":"a"},{"role":"user","content":"b","name":"x"},{"role":"user","content":null}]}`,
		`{"model":"m","messages":[{"role":"user","content":"a"},{"content":"b","role":"user"},{"role":"user","content":[{"type":"text","text":"c"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b` + "\x01" + `"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b\q"},]}`,
		`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"` + long + `"},{"role":"user","content":"c"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b\ud83d`,
		`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}`,
		`{"model":"m","messages":[{"role":"user","content":"a"}{"role":"user","content":"b"}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`,
		`{"model":"m","messages":[{"role":"assistant","tool_calls":{},"content":"x","n":[1,-2.5e3,true,false,null,{}]},{"role":"a","tool_calls":null,"tool_calls":[]}]}`,
		`{"model":"m","messages":[{"role":"a","content":"x","content":"y"},{"role":"a","n":01},{"role":"a","n":[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}]}`,
		`{"model":"m","messages":[{"role":7,"content":"a"},{"role":"user","content":"b"},{"role":"user","content":"b"}],"messages":[]}`,
		`{"messages":[{"content":"a\u00e9","role":"system"},{"content":null,"role":"user"},{"content":"b","name":"x","role":"user"}],"model":"m"}`,
		`{"model":"m","messages":[{"content":"a","content":"b","role":"user"},{"content":"a"},{"name":"x","content":"b"},{}]}`,
		`{"model":"m","messages":[{"content":"` + long + `","role":"user"},{"tool_calls":[],"content":"x","role":"a"}]}`,
	} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(2))
	}
	f.Fuzz(func(t *testing.T, body string, mode uint8) {
		trunc := mode&2 == 2
		run := func(slow bool) (string, Request, error) {
			p := Parser{slow: slow}
			var buf bytes.Buffer
			var req Request
			err := p.ParseText(Chat, []byte(body), trunc, &buf, &req)
			req.Model = nil
			return buf.String(), req, err
		}
		got, greq, gerr := run(false)
		want, wreq, werr := run(true)
		if got != want || !reflect.DeepEqual(greq, wreq) || (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("ParseText(%q, truncated %v) = %q, %+v, %v; general walk: %q, %+v, %v",
				body, trunc, got, greq, gerr, want, wreq, werr)
		}
	})
}

// TestFastMessagesTake checks that the common message shapes take the fast
// path: every plain turn of agentBody.
func TestFastMessagesTake(t *testing.T) {
	for _, m := range []string{
		`{"role":"user","content":"a \"b\"\n\u00e9"}`,
		`{ "role": "assistant", "content": "" }`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}`,
		`{"role":"tool","tool_call_id":"call_1","content":"42"}`,
		`{"role":"system","content":"` + strings.Repeat("x", 1900) + `"}`,
		`{"content":"Question 0: a \"b\"\n","role":"user"}`,
		`{ "content" : null , "role" : "assistant", "tool_calls": [] }`,
		`{"content":"` + strings.Repeat("x", 1900) + `","role":"system"}`,
	} {
		var p Parser
		if end := p.fastMessage([]byte(m), 0, 3); end != len(m) {
			t.Errorf("fastMessage(%.40q) = %d, want %d", m, end, len(m))
		}
	}
}

// BenchmarkStreamCounterEvent is one streamed token event as a chunk of
// its own (vLLM's chat chunk with one token), once the counter has a
// template: a response's per-token cost.
func BenchmarkStreamCounterEvent(b *testing.B) {
	event := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1730000000,` +
		`"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" token"},` +
		`"logprobs":null,"finish_reason":null}]}` + "\n\n")
	c := new(StreamCounter)
	c.Write(event)
	b.ReportAllocs()
	b.SetBytes(int64(len(event)))
	for b.Loop() {
		c.Write(event)
	}
	if c.ContentDeltas < b.N {
		b.Fatalf("counted %d tokens in %d events", c.ContentDeltas, b.N+1)
	}
}
