package openai

import (
	"bytes"
	"errors"
	"testing"
)

// agentWant is what a Messages or Responses parse yields.
type agentWant struct {
	model     string
	maxTok    int64
	hasMax    bool
	stream    bool
	usage     bool
	text      string
	prevID    uint64
	hasPrevID bool
}

// media is the placeholder ParseText writes for a part or item of type typ
// whose raw JSON is raw.
func media(typ, raw string) string { return "\x1a" + typ + ":" + hex16(fnv64([]byte(raw))) + "\x1a" }

const sys = "system" + rs // a system message's head

func TestParseAgents(t *testing.T) {
	weather := `{"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Paris"}}`
	image := `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}`
	inputImage := `{"type":"input_image","image_url":"https://example.com/q.png"}`
	reference := `{"type":"item_reference","id":"msg_0"}`
	tests := []struct {
		name    string
		kind    Kind
		body    string
		want    agentWant
		wantErr error
		bad     bool
	}{
		{name: "messages system then messages", kind: Messages,
			body: `{"model":"claude","max_tokens":64,"system":"Be brief.","messages":[{"role":"user","content":"Hi"}],"stream":true}`,
			want: agentWant{model: "claude", maxTok: 64, hasMax: true, stream: true, usage: true,
				text: sys + "Be brief." + us + "user" + rs + "Hi" + us}},
		{name: "messages system after messages", kind: Messages,
			body: `{"max_tokens":64,"messages":[{"content":"Hi","role":"user"}],"model":"claude","system":"Be brief."}`,
			want: agentWant{model: "claude", maxTok: 64, hasMax: true, text: sys + "Be brief." + us + "user" + rs + "Hi" + us}},
		{name: "messages system blocks, billing header left out", kind: Messages,
			body: `{"model":"m","max_tokens":8,"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1; cch=9f3a"},` +
				`{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Be terse."}],` +
				`"messages":[{"role":"user","content":"Hi"}]}`,
			want: agentWant{model: "m", maxTok: 8, hasMax: true, text: sys + "You are Claude Code.\nBe terse." + us + "user" + rs + "Hi" + us}},
		{name: "messages blocks: thinking, text, tool_use, tool_result, image", kind: Messages,
			body: `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"Weather?"},` +
				`{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"Let me check."},` + weather + `]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"sunny"}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a"},` + image + `]},` + image + `,{"type":"text","text":"what?"}]}]}`,
			want: agentWant{model: "m", maxTok: 8, hasMax: true, text: "user" + rs + "Weather?" + us +
				"assistant" + rs + "Let me check.\n" + gs + "get_weather" + gs + `{"city":"Paris"}` + us +
				"user" + rs + gs + "sunny" + us +
				"user" + rs + gs + "a\n" + media("image", image) + "\n" + media("image", image) + "\nwhat?" + us}},
		{name: "messages one text block is its string", kind: Messages,
			body: `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}]}`,
			want: agentWant{model: "m", maxTok: 8, hasMax: true, text: "user" + rs + "Hi" + us}},
		{name: "messages empty system writes nothing", kind: Messages,
			body: `{"model":"m","max_tokens":8,"system":"","messages":[{"role":"user","content":"Hi"}]}`,
			want: agentWant{model: "m", maxTok: 8, hasMax: true, text: "user" + rs + "Hi" + us}},
		{name: "messages max_tokens missing", kind: Messages,
			body:    `{"model":"m","messages":[{"role":"user","content":"Hi"}]}`,
			want:    agentWant{model: "m", text: "user" + rs + "Hi" + us},
			wantErr: ErrBadField},
		{name: "messages max_tokens zero", kind: Messages,
			body:    `{"model":"m","max_tokens":0,"messages":[]}`,
			want:    agentWant{model: "m"},
			wantErr: ErrBadField},
		{name: "messages max_tokens null", kind: Messages,
			body:    `{"model":"m","max_tokens":null}`,
			want:    agentWant{model: "m"},
			wantErr: ErrBadField},
		{name: "messages skip chat's fields", kind: Messages,
			body: `{"model":"m","max_tokens":5,"max_completion_tokens":1,"n":0,"stream_options":7,"input":"x","prompt":"y"}`,
			want: agentWant{model: "m", maxTok: 5, hasMax: true}},
		{name: "messages system a number", kind: Messages,
			body:    `{"model":"m","max_tokens":5,"system":3,"messages":[{"role":"user","content":"Hi"}]}`,
			want:    agentWant{model: "m", maxTok: 5, hasMax: true},
			wantErr: ErrBadField, bad: true},
		{name: "messages system twice", kind: Messages,
			body:    `{"model":"m","max_tokens":5,"system":"a","system":"b","messages":[]}`,
			want:    agentWant{model: "m", maxTok: 5, hasMax: true, text: sys + "a" + us},
			wantErr: ErrBadField},
		{name: "responses instructions then input", kind: Responses,
			body: `{"model":"m","instructions":"Be brief.","input":"Hi","max_output_tokens":100,"stream":true}`,
			want: agentWant{model: "m", maxTok: 100, hasMax: true, stream: true, usage: true,
				text: sys + "Be brief." + us + "user" + rs + "Hi" + us}},
		{name: "responses input before instructions", kind: Responses,
			body: `{"input":"Hi","instructions":"Be brief.","model":"m"}`,
			want: agentWant{model: "m", text: sys + "Be brief." + us + "user" + rs + "Hi" + us}},
		{name: "responses input items", kind: Responses,
			body: `{"model":"m","input":[{"role":"user","content":"Hi"},` +
				`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}],"id":"msg_1","status":"completed"},` +
				`{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},` +
				`{"type":"function_call_output","call_id":"c1","output":"sunny"},` +
				`{"type":"reasoning","id":"rs_1","summary":[]},` + reference + `,` +
				`{"role":"user","content":[{"type":"input_text","text":"and?"},` + inputImage + `]}]}`,
			want: agentWant{model: "m", text: "user" + rs + "Hi" + us + "assistant" + rs + "Hello" + us +
				"assistant" + rs + gs + "get_weather" + gs + `{"city":"Paris"}` + us + "tool" + rs + "sunny" + us +
				media("item_reference", reference) + us + "user" + rs + "and?\n" + media("input_image", inputImage) + us}},
		{name: "responses the input string is a user message", kind: Responses,
			body: `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"Hi"}]}]}`,
			want: agentWant{model: "m", text: "user" + rs + "Hi" + us}},
		{name: "responses previous_response_id", kind: Responses,
			body: `{"model":"m","previous_response_id":"resp_abc","input":"next"}`,
			want: agentWant{model: "m", text: "user" + rs + "next" + us, prevID: fnv64([]byte("resp_abc")), hasPrevID: true}},
		{name: "responses previous_response_id escaped", kind: Responses,
			body: `{"model":"m","previous_response_id":"resp\u005fabc"}`,
			want: agentWant{model: "m", prevID: fnv64([]byte("resp_abc")), hasPrevID: true}},
		{name: "responses previous_response_id a number", kind: Responses,
			body:    `{"model":"m","previous_response_id":7}`,
			want:    agentWant{model: "m"},
			wantErr: ErrBadField},
		{name: "responses skip other endpoints' fields", kind: Responses,
			body: `{"model":"m","max_tokens":5,"n":0,"system":"x","messages":"y","prompt":{"id":"p"}}`,
			want: agentWant{model: "m"}},
		{name: "responses input a number", kind: Responses,
			body:    `{"model":"m","input":5}`,
			want:    agentWant{model: "m"},
			wantErr: ErrBadField, bad: true},
		{name: "responses instructions an array", kind: Responses,
			body:    `{"model":"m","instructions":[{"role":"system","content":"x"}],"input":"Hi"}`,
			want:    agentWant{model: "m"},
			wantErr: ErrBadField, bad: true},
		{name: "previous_response_id is the Responses API's only", kind: Chat,
			body: `{"model":"m","previous_response_id":"resp_abc","messages":[]}`,
			want: agentWant{model: "m"}},
	}
	var p Parser
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			var req Request
			err := p.ParseText(tt.kind, []byte(tt.body), false, &buf, &req)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("ParseText(%.80q) error = %v, want %v", tt.body, err, tt.wantErr)
			}
			got := agentWant{string(req.Model), req.MaxTokens, req.HasMaxTokens, req.Stream, req.IncludeUsage,
				buf.String(), req.PreviousResponseID, req.HasPreviousResponse}
			if got != tt.want || req.PromptBad != tt.bad || req.PromptChars != buf.Len() {
				t.Errorf("ParseText(%.80q) =\n %#v, bad %v, %d chars\nwant\n %#v, bad %v, %d chars",
					tt.body, got, req.PromptBad, req.PromptChars, tt.want, tt.bad, buf.Len())
			}
		})
	}
}

// TestAgentsFrameAsChat: a Messages or Responses request writes the bytes
// of the chat request vLLM converts it to, so that a conversation that
// moves between the endpoints keeps its prefix.
func TestAgentsFrameAsChat(t *testing.T) {
	chat := `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},` +
		`{"role":"assistant","content":"Hello"},{"role":"user","content":"More?"}]}`
	tests := []struct {
		name string
		kind Kind
		body string
	}{
		{name: "messages", kind: Messages, body: `{"model":"m","max_tokens":9,"system":"Be brief.","messages":[{"role":"user","content":"Hi"},` +
			`{"role":"assistant","content":[{"type":"text","text":"Hello"}]},{"role":"user","content":"More?"}]}`},
		{name: "responses", kind: Responses, body: `{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":"Hi"},` +
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello"}]},{"role":"user","content":"More?"}]}`},
	}
	var p Parser
	var req Request
	var want bytes.Buffer
	if err := p.ParseText(Chat, []byte(chat), false, &want, &req); err != nil {
		t.Fatalf("ParseText(chat) error = %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got bytes.Buffer
			if err := p.ParseText(tt.kind, []byte(tt.body), false, &got, &req); err != nil || got.String() != want.String() {
				t.Errorf("ParseText(%s) = %q, %v; want the chat request's %q", tt.name, got.String(), err, want.String())
			}
		})
	}
}
