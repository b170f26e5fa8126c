package openai

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// js is s as a JSON string.
func js(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// answerPieces is an answer as an engine streams it, a few characters an
// event, with characters a JSON encoder escapes.
var answerPieces = func() []string {
	var p []string
	for i := 0; i < 40; i++ {
		p = append(p, "Step ", strings.Repeat("é", i%3)+`"quoted"`, " and\nmore; ")
	}
	return p
}()

var answerText = strings.Join(answerPieces, "")

const (
	systemPrompt = "You are a careful assistant. Answer in full sentences and quote your sources."
	question1    = "What does the cache hold after the first turn?"
	question2    = "And after the second?"
)

// turns builds, for kind, turn 1's request, the stream that answers it, the
// same answer as a non-streamed body, and turn 2's request, which quotes the
// answer as the endpoint's clients send it back.
func turns(kind Kind) (turn1, stream, body, turn2 string) {
	var s strings.Builder
	switch kind {
	case Completion:
		prompt := systemPrompt + "\n" + question1 + "\n"
		turn1 = `{"model":"m","prompt":` + js(prompt) + `,"stream":true}`
		for _, p := range answerPieces {
			s.WriteString(sse("", `{"id":"c","object":"text_completion","choices":[{"index":0,"text":`+js(p)+`,"finish_reason":null}]}`))
		}
		s.WriteString(sse("", `{"id":"c","choices":[{"index":0,"text":"","finish_reason":"stop"}]}`) + "data: [DONE]\n\n")
		body = `{"id":"c","choices":[{"index":0,"text":` + js(answerText) + `,"finish_reason":"stop"}],"usage":{"prompt_tokens":30,"completion_tokens":120}}`
		turn2 = `{"model":"m","prompt":` + js(prompt+answerText+"\n"+question2) + `}`
	case Chat:
		history := `{"role":"system","content":` + js(systemPrompt) + `},{"role":"user","content":` + js(question1) + `}`
		turn1 = `{"model":"m","messages":[` + history + `],"stream":true}`
		s.WriteString(sse("", `{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`))
		for _, p := range answerPieces {
			s.WriteString(sse("", `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":`+js(p)+`},"finish_reason":null}]}`))
		}
		s.WriteString(sse("", `{"id":"c","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}`) + "data: [DONE]\n\n")
		body = `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":` + js(answerText) + `},"finish_reason":"stop"}]}`
		turn2 = `{"model":"m","messages":[` + history + `,{"role":"assistant","content":` + js(answerText) +
			`},{"role":"user","content":` + js(question2) + `}]}`
	case Messages:
		turn1 = `{"model":"m","max_tokens":512,"stream":true,"messages":[{"role":"user","content":` + js(question1) + `}],"system":` + js(systemPrompt) + `}`
		s.WriteString(sse("message_start", `{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":30,"output_tokens":1}}}`))
		s.WriteString(sse("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`))
		s.WriteString(sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"First, the cache."}}`))
		s.WriteString(sse("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`))
		for _, p := range answerPieces {
			s.WriteString(sse("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":`+js(p)+`}}`))
		}
		s.WriteString(sse("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":130}}`))
		s.WriteString(sse("message_stop", `{"type":"message_stop"}`))
		blocks := `[{"type":"thinking","thinking":"First, the cache.","signature":"sig"},{"type":"text","text":` + js(answerText) + `}]`
		body = `{"id":"msg_1","type":"message","role":"assistant","content":` + blocks + `,"usage":{"input_tokens":30,"output_tokens":130}}`
		turn2 = `{"model":"m","max_tokens":512,"system":` + js(systemPrompt) + `,"messages":[{"role":"user","content":` + js(question1) +
			`},{"role":"assistant","content":` + blocks + `},{"role":"user","content":` + js(question2) + `}]}`
	case Responses:
		turn1 = `{"model":"m","input":` + js(question1) + `,"instructions":` + js(systemPrompt) + `,"stream":true}`
		s.WriteString(sse("response.created", `{"type":"response.created","response":{"id":"resp_1","status":"in_progress","usage":null}}`))
		s.WriteString(sse("response.output_item.added", `{"type":"response.output_item.added","output_index":0,"item":{"type":"reasoning","id":"rs_1"}}`))
		s.WriteString(sse("response.output_item.added", `{"type":"response.output_item.added","output_index":1,"item":{"type":"message","id":"msg_1","role":"assistant"}}`))
		for i, p := range answerPieces {
			s.WriteString(sse("response.output_text.delta", `{"content_index":0,"delta":`+js(p)+`,"item_id":"msg_1","output_index":1,"sequence_number":`+
				strings.Repeat("9", i%4+1)+`,"type":"response.output_text.delta"}`))
		}
		s.WriteString(sse("response.completed", `{"type":"response.completed","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":30,"output_tokens":130}}}`))
		output := `[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"message","id":"msg_1","role":"assistant","status":"completed",` +
			`"content":[{"type":"output_text","text":` + js(answerText) + `,"annotations":[]}]}]`
		body = `{"id":"resp_1","object":"response","status":"completed","output":` + output + `,"usage":{"input_tokens":30,"output_tokens":130}}`
		turn2 = `{"model":"m","instructions":` + js(systemPrompt) + `,"input":[{"role":"user","content":` + js(question1) + `},` +
			output[1:len(output)-1] + `,{"role":"user","content":` + js(question2) + `}]}`
	}
	return turn1, s.String(), body, turn2
}

var allKinds = []struct {
	name string
	kind Kind
}{{"completions", Completion}, {"chat", Chat}, {"messages", Messages}, {"responses", Responses}}

// hashPrompt parses body as kind into a fresh router-sized hasher, as the
// router does, and returns the hasher, seeded.
func hashPrompt(t *testing.T, kind Kind, body string) *prefix.Hasher {
	t.Helper()
	var p Parser
	var req Request
	h := routerHasher()
	h.ResetDeferred()
	if err := p.ParseText(kind, []byte(body), false, h, &req); err != nil {
		t.Fatalf("ParseText(%.60q) error = %v", body, err)
	}
	h.SetSeed(string(req.Model), "")
	return h
}

// TestAnswerContinuesChain is the router's use of a recorded answer: turn
// 1's prompt is hashed and its chain saved; the streamed answer goes
// through the StreamCounter into a hasher resumed from that chain, a Resume
// and a Save around every chunk (the answer's hasher is the VM's, shared by
// its streams); turn 2's request, which quotes the answer, must begin with
// exactly turn 1's blocks and the answer's. The same holds for the
// non-streamed body through Reply.
func TestAnswerContinuesChain(t *testing.T) {
	for _, k := range allKinds {
		t.Run(k.name, func(t *testing.T) {
			turn1, stream, body, turn2 := turns(k.kind)
			h1 := hashPrompt(t, k.kind, turn1)
			want := slices.Clone(h1.Chain())
			next := slices.Clone(hashPrompt(t, k.kind, turn2).Chain())

			answerHasher := routerHasher()
			for _, streamed := range []bool{true, false} {
				var cont prefix.Continuation
				h1.Save(&cont)
				var added []uint64
				if streamed {
					var c StreamCounter
					c.Record(k.kind, answerHasher)
					for i := 0; i < len(stream); i += 7 {
						from := cont.Blocks()
						if !answerHasher.Resume(&cont) {
							t.Fatal("Resume = false")
						}
						c.Write([]byte(stream[i:min(i+7, len(stream))]))
						added = append(added, answerHasher.Chain()[from:]...)
						answerHasher.Save(&cont)
					}
					if _, whole := c.Answer(); !whole {
						t.Errorf("streamed answer not whole")
					}
				} else {
					from := cont.Blocks()
					answerHasher.Resume(&cont)
					var c StreamCounter
					c.Record(k.kind, answerHasher)
					c.Reply([]byte(body))
					if _, whole := c.Answer(); !whole {
						t.Errorf("Reply answer not whole")
					}
					added = append(added, answerHasher.Chain()[from:]...)
				}
				whole := append(slices.Clone(want), added...)
				if len(added) < len(answerText)/prefix.DefaultBlockChars-1 {
					t.Fatalf("streamed %v: the answer completed %d blocks, want about %d", streamed, len(added), len(answerText)/prefix.DefaultBlockChars)
				}
				if len(next) < len(whole) || !slices.Equal(next[:len(whole)], whole) {
					t.Fatalf("streamed %v: turn 2's chain (%d blocks) begins with %d of the %d blocks of turn 1 and its answer",
						streamed, len(next), commonBlocks(next, whole), len(whole))
				}
			}
		})
	}
}

func commonBlocks(a, b []uint64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestAnswerFraming: the text recorded is, byte for byte, what ParseText
// writes for the answer in turn 2, streamed or not, whatever the chunking.
func TestAnswerFraming(t *testing.T) {
	var p Parser
	var req Request
	for _, k := range allKinds {
		t.Run(k.name, func(t *testing.T) {
			turn1, stream, body, turn2 := turns(k.kind)
			var text1, text2 bytes.Buffer
			p.ParseText(k.kind, []byte(turn1), false, &text1, &req)
			p.ParseText(k.kind, []byte(turn2), false, &text2, &req)
			if !bytes.HasPrefix(text2.Bytes(), text1.Bytes()) {
				t.Fatalf("turn 2's text does not begin with turn 1's")
			}
			quoted := text2.String()[text1.Len():]
			for _, step := range []int{1, 13, len(stream)} {
				var rec bytes.Buffer
				var c StreamCounter
				c.Record(k.kind, &rec)
				writeChunks(&c, []byte(stream), step)
				chars, whole := c.Answer()
				if !strings.HasPrefix(quoted, rec.String()) || rec.Len() < len(answerText) || !whole || chars != int64(rec.Len()) {
					t.Fatalf("streamed in %d-byte chunks: recorded %q (whole %v, %d chars), want the head of %q",
						step, rec.String(), whole, chars, quoted)
				}
			}
			var rec bytes.Buffer
			var c StreamCounter
			c.Record(k.kind, &rec)
			c.Reply([]byte(body))
			if chars, _ := c.Answer(); !strings.HasPrefix(quoted, rec.String()) || rec.Len() < len(answerText) || chars != int64(rec.Len()) {
				t.Fatalf("Reply recorded %q, want the head of %q", rec.String(), quoted)
			}
		})
	}
}

// TestAnswerStops: what is recorded when the answer is not plain text to
// its end.
func TestAnswerStops(t *testing.T) {
	chat := func(delta string) string { return sse("", `{"choices":[{"index":0,"delta":`+delta+`}]}`) }
	const done = "data: [DONE]\n\n"
	head := "assistant" + rs
	tests := []struct {
		name  string
		kind  Kind
		in    string
		want  string
		whole bool
	}{
		{name: "chat whole", kind: Chat, in: chat(`{"content":"a"}`) + chat(`{"content":"b"}`) + done, want: head + "ab" + us, whole: true},
		{name: "chat empty answer", kind: Chat, in: chat(`{"role":"assistant","content":""}`) + done, want: head + us, whole: true},
		{name: "chat tool call ends the text", kind: Chat,
			in: chat(`{"content":"a"}`) + chat(`{"tool_calls":[{"index":0,"function":{"name":"f"}}]}`) + chat(`{"content":"b"}`) + done, want: head + "a"},
		{name: "chat tool calls alone", kind: Chat, in: chat(`{"tool_calls":[{"index":0}]}`) + done},
		{name: "chat reasoning left out", kind: Chat, in: chat(`{"reasoning_content":"hm"}`) + chat(`{"content":"a"}`) + done, want: head + "a" + us, whole: true},
		{name: "chat only choice 0", kind: Chat,
			in:   sse("", `{"choices":[{"index":1,"delta":{"content":"x"}},{"index":0,"delta":{"content":"a"}}]}`) + sse("", `{"choices":[{"delta":{"content":"b"},"index":1}]}`) + done,
			want: head + "a" + us, whole: true},
		{name: "chat cut before [DONE]", kind: Chat, in: chat(`{"content":"a"}`), want: head + "a"},
		{name: "chat oversized event ends the text", kind: Chat,
			in: chat(`{"content":"a"}`) + chat(`{"content":"`+strings.Repeat("x", MaxLineBytes)+`"}`) + chat(`{"content":"b"}`) + done, want: head + "a"},
		{name: "completions", kind: Completion, in: sse("", `{"choices":[{"text":"a\nb"}]}`) + done, want: "a\nb", whole: true},
		{name: "messages two text blocks", kind: Messages,
			in: sse("", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`) +
				sse("", `{"type":"content_block_start","index":1,"content_block":{"type":"thinking"}}`) +
				sse("", `{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"t"}}`) +
				sse("", `{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"b"}}`) + sse("", `{"type":"message_stop"}`),
			want: head + "a\nb" + us, whole: true},
		{name: "messages tool_use ends the text", kind: Messages,
			in: sse("", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`) +
				sse("", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}`) +
				sse("", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}`) + sse("", `{"type":"message_stop"}`),
			want: head + "a"},
		{name: "responses function call ends the text", kind: Responses,
			in: sse("", `{"type":"response.output_text.delta","output_index":0,"content_index":0,"delta":"a"}`) +
				sse("", `{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","name":"f"}}`) +
				sse("", `{"type":"response.function_call_arguments.delta","output_index":1,"delta":"{}"}`) + sse("", `{"type":"response.completed","response":{}}`),
			want: head + "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec bytes.Buffer
			var c StreamCounter
			c.Record(tt.kind, &rec)
			c.Write([]byte(tt.in))
			if _, whole := c.Answer(); rec.String() != tt.want || whole != tt.whole {
				t.Errorf("recorded %q, whole %v; want %q, %v", rec.String(), whole, tt.want, tt.whole)
			}
		})
	}
}

// TestAnswerWriterError: a writer that fails ends the recording, and the
// counting goes on.
func TestAnswerWriterError(t *testing.T) {
	w := &failWriter{left: 12}
	var c StreamCounter
	c.Record(Chat, w)
	stream := sse("", `{"choices":[{"delta":{"content":"abcdef"}}]}`)
	c.Write([]byte(strings.Repeat(stream, 3) + "data: [DONE]\n\n"))
	if chars, whole := c.Answer(); chars != 12 || whole || c.ContentDeltas != 3 {
		t.Errorf("Answer() = %d, %v with %d deltas; want 12, false, 3", chars, whole, c.ContentDeltas)
	}
}

func TestReply(t *testing.T) {
	head := "assistant" + rs
	tests := []struct {
		name  string
		kind  Kind
		body  string
		want  string
		whole bool
		id    string
	}{
		{name: "chat", kind: Chat, body: `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"a\u00e9"}}]}`, want: head + "aé" + us, whole: true},
		{name: "chat tool calls", kind: Chat, body: `{"choices":[{"message":{"content":"a","tool_calls":[{"id":"t"}]}}]}`, want: head + "a"},
		{name: "chat content null", kind: Chat, body: `{"choices":[{"message":{"content":null}}]}`, want: head + us, whole: true},
		{name: "chat choice 0 only", kind: Chat, body: `{"choices":[{"index":1,"message":{"content":"x"}},{"index":0,"message":{"content":"a"}}]}`, want: head + "a" + us, whole: true},
		{name: "completions", kind: Completion, body: `{"choices":[{"text":"a b"}]}`, want: "a b", whole: true},
		{name: "messages", kind: Messages, body: `{"content":[{"type":"thinking","thinking":"t"},{"type":"text","text":"a"},{"type":"text","text":"b"}],"usage":{"input_tokens":1,"output_tokens":2}}`,
			want: head + "a\nb" + us, whole: true},
		{name: "messages tool_use", kind: Messages, body: `{"content":[{"type":"text","text":"a"},{"type":"tool_use","name":"f","input":{}}]}`, want: head + "a"},
		{name: "responses", kind: Responses, id: "resp_9",
			body: `{"id":"resp_9","output":[{"type":"reasoning","summary":[]},{"type":"message","content":[{"type":"output_text","text":"a"},{"type":"refusal","refusal":"no"}]}]}`,
			want: head + "a\nno" + us, whole: true},
		{name: "responses function call", kind: Responses, body: `{"output":[{"type":"function_call","name":"f"}]}`},
		{name: "not json", kind: Chat, body: `{"choices":[{"message":{"content":"a"}}]`},
		{name: "id is the Responses API's", kind: Chat, body: `{"id":"c"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec bytes.Buffer
			var c StreamCounter
			c.Record(tt.kind, &rec)
			r := c.Reply([]byte(tt.body))
			if chars, whole := c.Answer(); rec.String() != tt.want || whole != tt.whole || chars != int64(rec.Len()) {
				t.Errorf("Reply(%q) recorded %q, whole %v; want %q, %v", tt.body, rec.String(), whole, tt.want, tt.whole)
			}
			if wantID := tt.id != ""; r.HasResponseID != wantID || wantID && r.ResponseID != fnv64([]byte(tt.id)) {
				t.Errorf("Reply(%q).ResponseID = %#x, %v; want the hash of %q", tt.body, r.ResponseID, r.HasResponseID, tt.id)
			}
		})
	}
}

// TestAgentsAllocs: the endpoints' requests, streams and replies allocate
// nothing in steady state, a prompt read before its system prompt and the
// answer recorded into a resumed hasher included.
func TestAgentsAllocs(t *testing.T) {
	var p Parser
	var req Request
	for _, k := range allKinds {
		turn1, stream, body, turn2 := turns(k.kind)
		bodies := [][]byte{[]byte(turn1), []byte(turn2)}
		streamed, reply := []byte(stream), []byte(body)
		h := routerHasher()
		var cont prefix.Continuation
		var c StreamCounter
		run := func() {
			for _, b := range bodies {
				h.ResetDeferred()
				p.ParseText(k.kind, b, false, h, &req)
				h.SetSeed("m", "")
			}
			h.Save(&cont)
			c.Reset()
			c.Record(k.kind, h)
			for i := 0; i < len(streamed); i += 97 {
				h.Resume(&cont)
				c.Write(streamed[i:min(i+97, len(streamed))])
				h.Save(&cont)
			}
			h.Resume(&cont)
			c.Reset()
			c.Record(k.kind, h)
			c.Reply(reply)
		}
		run() // sizes the continuation and the parser's held buffer
		if allocs := testing.AllocsPerRun(20, run); allocs != 0 {
			t.Errorf("%s: ParseText, StreamCounter with Record, Reply allocs = %v, want 0", k.name, allocs)
		}
	}
}
