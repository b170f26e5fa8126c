package openai

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
)

type parseWant struct {
	model     string
	maxTok    int64
	hasMax    bool
	stream    bool
	usage     bool
	n         int64
	text      string // exact bytes written
	tokens    int
	truncated bool
}

// rs/us build the chat framing in expectations.
const rs, us, gs = "\x1e", "\x1f", "\x1d"

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		kind    Kind
		body    string
		trunc   bool // the body may be cut
		want    parseWant
		wantErr error
		bad     bool // PromptBad: the prompt has the wrong shape
	}{
		{name: "completion string", kind: Completion,
			body: `{"model":"llama","prompt":"Hello world","max_tokens":16}`,
			want: parseWant{model: "llama", maxTok: 16, hasMax: true, n: 1, text: "Hello world"}},
		{name: "completion array of strings", kind: Completion,
			body: `{"model":"m","prompt":["ab","c"]}`,
			want: parseWant{model: "m", n: 1, text: "ab" + us + "c"}},
		{name: "completion one-element array equals string", kind: Completion,
			body: `{"model":"m","prompt":["abc"]}`,
			want: parseWant{model: "m", n: 1, text: "abc"}},
		{name: "completion token ids", kind: Completion,
			body: `{"model":"m","prompt":[1,258,0]}`,
			want: parseWant{model: "m", n: 1, text: "\x01\x00\x00\x00\x02\x01\x00\x00\x00\x00\x00\x00", tokens: 3}},
		{name: "completion token id batches", kind: Completion,
			body: `{"model":"m","prompt":[[1],[2, 3]]}`,
			want: parseWant{model: "m", n: 1, text: "\x01\x00\x00\x00\xff\xff\xff\xff\x02\x00\x00\x00\x03\x00\x00\x00", tokens: 3}},
		{name: "completion token id too large", kind: Completion,
			body:    `{"model":"m","prompt":[1,4294967296]}`,
			want:    parseWant{model: "m", n: 1, text: "\x01\x00\x00\x00", tokens: 1},
			wantErr: ErrBadField, bad: true},
		{name: "completion mixed prompt array", kind: Completion,
			body:    `{"model":"m","prompt":["a",1]}`,
			want:    parseWant{model: "m", n: 1, text: "a"},
			wantErr: ErrBadField, bad: true},
		{name: "completion prompt object", kind: Completion,
			body:    `{"model":"m","prompt":{"a":1}}`,
			want:    parseWant{model: "m", n: 1},
			wantErr: ErrBadField, bad: true},
		{name: "completion ignores messages", kind: Completion,
			body: `{"model":"m","messages":[{"role":"user","content":"x"}]}`,
			want: parseWant{model: "m", n: 1}},
		{name: "chat string content", kind: Chat,
			body: `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"model":"llama:sql"}`,
			want: parseWant{model: "llama:sql", n: 1, text: "system" + rs + "Be brief." + us + "user" + rs + "Hi" + us}},
		{name: "chat key order inside message", kind: Chat,
			body: `{"model":"m","messages":[{"content":"Hi","role":"user"}]}`,
			want: parseWant{model: "m", n: 1, text: "user" + rs + "Hi" + us}},
		{name: "chat parts", kind: Chat,
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"text","text":"here"}]}]}`,
			want: parseWant{model: "m", n: 1, text: "user" + rs + "look\nhere" + us}},
		{name: "chat image part placeholder", kind: Chat,
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"text","text":"what?"}]}]}`,
			want: parseWant{model: "m", n: 1, text: "user" + rs + "\x1aimage_url:" +
				hex16(fnv64([]byte(`{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}`))) + "\x1a\nwhat?" + us}},
		{name: "chat refusal part", kind: Chat,
			body: `{"model":"m","messages":[{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]}]}`,
			want: parseWant{model: "m", n: 1, text: "assistant" + rs + "no" + us}},
		{name: "chat null content with tool calls", kind: Chat,
			body: `{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}]}`,
			want: parseWant{model: "m", n: 1, text: "assistant" + rs + gs + `[{"id":"1"}]` + us}},
		{name: "chat content twice keeps the first", kind: Chat,
			body:    `{"model":"m","messages":[{"content":"a","role":"user","content":"b"}]}`,
			want:    parseWant{model: "m", n: 1, text: "user" + rs + "a" + us},
			wantErr: ErrBadField},
		{name: "chat role twice keeps the first", kind: Chat,
			body:    `{"model":"m","messages":[{"content":"a","role":"user","role":"tool"}]}`,
			want:    parseWant{model: "m", n: 1, text: "user" + rs + "a" + us},
			wantErr: ErrBadField},
		{name: "chat part text twice keeps the first", kind: Chat,
			body:    `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}`,
			want:    parseWant{model: "m", n: 1, text: "user" + rs + "a" + us},
			wantErr: ErrBadField},
		{name: "chat missing role", kind: Chat,
			body: `{"model":"m","messages":[{"content":"x"}]}`,
			want: parseWant{model: "m", n: 1, text: rs + "x" + us}},
		{name: "chat role not string", kind: Chat,
			body:    `{"model":"m","messages":[{"role":1,"content":"x"}]}`,
			want:    parseWant{model: "m", n: 1},
			wantErr: ErrBadField, bad: true},
		{name: "chat content number", kind: Chat,
			body:    `{"model":"m","messages":[{"role":"user","content":5}]}`,
			want:    parseWant{model: "m", n: 1, text: "user" + rs},
			wantErr: ErrBadField, bad: true},
		{name: "chat messages not array", kind: Chat,
			body:    `{"model":"m","messages":"hi"}`,
			want:    parseWant{model: "m", n: 1},
			wantErr: ErrBadField, bad: true},
		{name: "escapes", kind: Chat,
			body: `{"model":"m","messages":[{"role":"user","content":"a\nb\t\"q\" \\ \/ \u00e9 \ud83d\ude00 \ud800x"}]}`,
			want: parseWant{model: "m", n: 1, text: "user" + rs + "a\nb\t\"q\" \\ / é 😀 \uFFFDx" + us}},
		{name: "escaped model", kind: Chat,
			body: `{"model":"m\u0065ta","messages":[]}`,
			want: parseWant{model: "meta", n: 1}},
		{name: "invalid utf8 passes through", kind: Completion,
			body: "{\"model\":\"m\",\"prompt\":\"a\xff\xfeb\"}",
			want: parseWant{model: "m", n: 1, text: "a\xff\xfeb"}},
		{name: "max_completion_tokens wins", kind: Chat,
			body: `{"model":"m","max_completion_tokens":7,"max_tokens":100}`,
			want: parseWant{model: "m", maxTok: 7, hasMax: true, n: 1}},
		{name: "max_tokens null is absent", kind: Chat,
			body: `{"model":"m","max_tokens":null}`,
			want: parseWant{model: "m", n: 1}},
		{name: "max_tokens zero", kind: Chat,
			body: `{"model":"m","max_tokens":0}`,
			want: parseWant{model: "m", hasMax: true, n: 1}},
		{name: "negative max_tokens rejected", kind: Chat,
			body:    `{"model":"m","max_tokens":-5,"stream":true}`,
			want:    parseWant{model: "m", stream: true, n: 1},
			wantErr: ErrBadField},
		{name: "fractional max_tokens rejected", kind: Chat,
			body:    `{"model":"m","max_tokens":1.5}`,
			want:    parseWant{model: "m", n: 1},
			wantErr: ErrBadField},
		{name: "huge max_tokens rejected", kind: Chat,
			body:    `{"model":"m","max_tokens":99999999999999999999999}`,
			want:    parseWant{model: "m", n: 1},
			wantErr: ErrBadField},
		{name: "max int64 accepted", kind: Chat,
			body: `{"model":"m","max_tokens":9223372036854775807}`,
			want: parseWant{model: "m", maxTok: 9223372036854775807, hasMax: true, n: 1}},
		{name: "max_tokens string rejected", kind: Chat,
			body:    `{"model":"m","max_tokens":"10"}`,
			want:    parseWant{model: "m", n: 1},
			wantErr: ErrBadField},
		{name: "stream and usage", kind: Chat,
			body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"n":3}`,
			want: parseWant{model: "m", stream: true, usage: true, n: 3}},
		{name: "stream false", kind: Chat,
			body: `{"model":"m","stream":false}`,
			want: parseWant{model: "m", n: 1}},
		{name: "stream not bool", kind: Chat,
			body:    `{"model":"m","stream":"yes"}`,
			want:    parseWant{model: "m", n: 1},
			wantErr: ErrBadField},
		{name: "n zero rejected", kind: Chat,
			body:    `{"model":"m","n":0}`,
			want:    parseWant{model: "m", n: 1},
			wantErr: ErrBadField},
		{name: "missing model", kind: Chat,
			body:    `{"messages":[{"role":"user","content":"x"}]}`,
			want:    parseWant{n: 1, text: "user" + rs + "x" + us},
			wantErr: ErrNoModel},
		{name: "empty model", kind: Chat,
			body:    `{"model":""}`,
			want:    parseWant{n: 1},
			wantErr: ErrNoModel},
		{name: "model number", kind: Chat,
			body:    `{"model":7}`,
			want:    parseWant{n: 1},
			wantErr: ErrBadField},
		{name: "unknown fields skipped", kind: Chat,
			body: `{"model":"m","tools":[{"x":[1,{"y":null}]}],"temperature":0.7,"logit_bias":{"1":-100}}`,
			want: parseWant{model: "m", n: 1}},
		{name: "not json", kind: Chat, body: `hello`, wantErr: ErrNotJSON},
		{name: "top-level array", kind: Chat, body: `[{"model":"m"}]`, wantErr: ErrNotJSON},
		{name: "empty body", kind: Chat, body: ``, wantErr: ErrTruncated},
		{name: "trailing garbage", kind: Chat, body: `{"model":"m"} x`, wantErr: ErrNotJSON},
		{name: "bad escape", kind: Chat, body: `{"model":"m\x"}`, wantErr: ErrNotJSON},
		{name: "bad literal", kind: Chat, body: `{"model":"m","stream":tru}`, wantErr: ErrNotJSON},
		{name: "missing comma", kind: Chat, body: `{"model":"m" "stream":true}`, wantErr: ErrNotJSON},
		{name: "depth bomb", kind: Chat,
			body: `{"model":"m","x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`, wantErr: ErrTooDeep},
		{name: "depth 64 accepted", kind: Chat,
			body: `{"model":"m","x":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`,
			want: parseWant{model: "m", n: 1}},
		{name: "cut body rejected when not read as cut", kind: Chat,
			body: `{"model":"m","messages":[{"role":"user","content":"abc`, wantErr: ErrTruncated},
		{name: "truncated in content", kind: Chat, trunc: true,
			body: `{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"abc\ndef`,
			want: parseWant{model: "m", n: 1, truncated: true, text: "system" + rs + "S" + us + "user" + rs + "abc\ndef"}},
		{name: "truncated mid escape", kind: Chat, trunc: true,
			body: `{"model":"m","messages":[{"role":"user","content":"ab\u00`,
			want: parseWant{model: "m", n: 1, truncated: true, text: "user" + rs + "ab"}},
		{name: "truncated mid surrogate pair", kind: Chat, trunc: true,
			body: `{"model":"m","messages":[{"role":"user","content":"ab\ud83d\ude`,
			want: parseWant{model: "m", n: 1, truncated: true, text: "user" + rs + "ab"}},
		{name: "truncated after high surrogate", kind: Chat, trunc: true,
			body: `{"model":"m","messages":[{"role":"user","content":"ab\ud83d`,
			want: parseWant{model: "m", n: 1, truncated: true, text: "user" + rs + "ab"}},
		{name: "truncated after complete message", kind: Chat, trunc: true,
			body: `{"model":"m","messages":[{"role":"user","content":"a"},`,
			want: parseWant{model: "m", n: 1, truncated: true, text: "user" + rs + "a" + us}},
		{name: "truncated in message after content", kind: Chat, trunc: true,
			body: `{"model":"m","messages":[{"role":"user","content":"a"`,
			want: parseWant{model: "m", n: 1, truncated: true, text: "user" + rs + "a"}},
		{name: "truncated in role", kind: Chat, trunc: true,
			body: `{"model":"m","messages":[{"role":"us`,
			want: parseWant{model: "m", n: 1, truncated: true}},
		{name: "truncated in model", kind: Chat, trunc: true,
			body:    `{"max_tokens":5,"model":"meta-lla`,
			want:    parseWant{maxTok: 5, hasMax: true, n: 1, truncated: true},
			wantErr: ErrNoModel},
		{name: "truncated in number", kind: Chat, trunc: true,
			body: `{"model":"m","max_tokens":12`,
			want: parseWant{model: "m", n: 1, truncated: true}},
		{name: "truncated in key", kind: Chat, trunc: true,
			body: `{"model":"m","max_tok`,
			want: parseWant{model: "m", n: 1, truncated: true}},
		{name: "truncated token ids", kind: Completion, trunc: true,
			body: `{"model":"m","prompt":[1,2,3`,
			want: parseWant{model: "m", n: 1, truncated: true, text: "\x01\x00\x00\x00\x02\x00\x00\x00", tokens: 2}},
		{name: "truncated completion string", kind: Completion, trunc: true,
			body: `{"model":"m","prompt":"abc`,
			want: parseWant{model: "m", n: 1, truncated: true, text: "abc"}},
		{name: "truncated in tool_calls", kind: Chat, trunc: true,
			body: `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"1"},`,
			want: parseWant{model: "m", n: 1, truncated: true, text: "assistant" + rs + gs + `[{"id":"1"}`}},
		{name: "truncated but complete", kind: Chat, trunc: true,
			body: `{"model":"m"}`,
			want: parseWant{model: "m", n: 1}},
		{name: "truncated before anything", kind: Chat, trunc: true, body: ` `, wantErr: ErrNotJSON},
		{name: "truncated only brace", kind: Chat, trunc: true, body: `{`,
			want: parseWant{n: 1, truncated: true}, wantErr: ErrNoModel},
		{name: "truncated not json", kind: Chat, trunc: true, body: `{"a" 1`, wantErr: ErrNotJSON},
	}
	var p Parser
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			var req Request
			err := p.ParseText(tt.kind, []byte(tt.body), tt.trunc, &buf, &req)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("ParseText(%.80q) error = %v, want %v", tt.body, err, tt.wantErr)
			}
			if err != nil {
				_ = err.Error() // must format without panicking
				if c := err.(*Error).Code; c == CodeNotJSON || c == CodeTooDeep || c == CodeTruncated {
					return // the text written is to be discarded
				}
			}
			got := parseWant{string(req.Model), req.MaxTokens, req.HasMaxTokens, req.Stream, req.IncludeUsage,
				req.N, buf.String(), req.PromptTokensExact, req.Truncated}
			if got != tt.want || req.PromptBad != tt.bad {
				t.Errorf("ParseText(%.80q) =\n %#v, bad %v\nwant\n %#v, bad %v", tt.body, got, req.PromptBad, tt.want, tt.bad)
			}
			if req.PromptChars != buf.Len() {
				t.Errorf("ParseText(%.80q).PromptChars = %d, want %d", tt.body, req.PromptChars, buf.Len())
			}
		})
	}
}

// TestParseTextDuplicatePrompt: the first prompt is written, the second is
// a field error.
func TestParseTextDuplicatePrompt(t *testing.T) {
	var p Parser
	var req Request
	var buf bytes.Buffer
	body := `{"messages":[{"role":"user","content":"a"}],"model":"m","messages":[{"role":"user","content":"b"}]}`
	err := p.ParseText(Chat, []byte(body), false, &buf, &req)
	if !errors.Is(err, ErrBadField) || buf.String() != "user\x1ea\x1f" || string(req.Model) != "m" {
		t.Fatalf("ParseText(%q) = %q, model %q, error %v; want %q, model \"m\", ErrBadField", body, buf.String(), req.Model, err, "user\x1ea\x1f")
	}
}

// TestParseTextWriterError: the writer's error comes back, and writing stops.
func TestParseTextWriterError(t *testing.T) {
	var p Parser
	var req Request
	body := `{"model":"m","messages":[{"role":"user","content":"abc"},{"role":"user","content":"def"}]}`
	w := &failWriter{left: 5}
	if err := p.ParseText(Chat, []byte(body), false, w, &req); err != errWriter || req.PromptChars != 5 || string(req.Model) != "m" {
		t.Fatalf("ParseText(%q) to a failing writer = %v, %d chars, model %q; want %v, 5, \"m\"", body, err, req.PromptChars, req.Model, errWriter)
	}
}

var errWriter = errors.New("test: writer full")

// failWriter accepts left bytes, then fails.
type failWriter struct{ left int }

func (w *failWriter) Write(b []byte) (int, error) {
	if len(b) <= w.left {
		w.left -= len(b)
		return len(b), nil
	}
	n := w.left
	w.left = 0
	return n, errWriter
}

func hex16(h uint64) string {
	s := strconv.FormatUint(h, 16)
	return strings.Repeat("0", 16-len(s)) + s
}

// TestTruncatedIsPrefix cuts a chat body at every length and checks that what
// ParseText writes for the cut body is a prefix of what the full body writes.
func TestTruncatedIsPrefix(t *testing.T) {
	body := []byte(`{"model":"m","max_tokens":32,"messages":[{"role":"system","content":"Be \"brief\"\u00e9 \ud83d\ude00."},` +
		`{"role":"user","content":[{"type":"text","text":"a\nb"},{"type":"image_url","image_url":{"url":"x"}}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]}],"stream":true}`)
	var p Parser
	var req Request
	var full bytes.Buffer
	if err := p.ParseText(Chat, body, false, &full, &req); err != nil {
		t.Fatalf("ParseText(full) error = %v", err)
	}
	for n := 0; n <= len(body); n++ {
		var got bytes.Buffer
		err := p.ParseText(Chat, body[:n], true, &got, &req)
		if errors.Is(err, ErrNotJSON) {
			continue
		}
		if err != nil && !errors.Is(err, ErrNoModel) {
			t.Fatalf("ParseText(body[:%d]) error = %v", n, err)
		}
		if !bytes.HasPrefix(full.Bytes(), got.Bytes()) {
			t.Fatalf("ParseText(body[:%d]) = %q, not a prefix of %q", n, got.Bytes(), full.Bytes())
		}
	}
}

func TestKindFromPath(t *testing.T) {
	tests := []struct {
		name string
		path string
		want Kind
		ok   bool
	}{
		{name: "chat", path: "/v1/chat/completions", want: Chat, ok: true},
		{name: "completions with query", path: "/v1/completions?x=1", want: Completion, ok: true},
		{name: "other", path: "/v1/embeddings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := KindFromPath([]byte(tt.path))
			if got != tt.want || ok != tt.ok {
				t.Errorf("KindFromPath(%q) = %d, %v, want %d, %v", tt.path, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestLongStringChunks checks decoding across the fixed unescape chunks:
// escapes and surrogate pairs straddling every chunk boundary.
func TestLongStringChunks(t *testing.T) {
	for pad := 0; pad < 16; pad++ {
		raw := strings.Repeat("x", unescapeChunk-pad) + strings.Repeat(`\ud83d\ude00\n\u00e9`, 300)
		want := strings.Repeat("x", unescapeChunk-pad) + strings.Repeat("😀\né", 300)
		body := `{"model":"m","prompt":"` + raw + `"}`
		var p Parser
		var req Request
		var buf bytes.Buffer
		if err := p.ParseText(Completion, []byte(body), false, &buf, &req); err != nil || buf.String() != want {
			t.Fatalf("ParseText(pad %d) = %d bytes, %v, want %d bytes", pad, buf.Len(), err, len(want))
		}
	}
}

func TestErrorMessage(t *testing.T) {
	var p Parser
	var req Request
	err := p.ParseText(Chat, []byte(`{"model":"m","max_tokens":-3}`), false, nil, &req)
	want := `openai: field "max_tokens" must be an integer in [0, 9223372036854775807] or null, got "-3"`
	if err == nil || err.Error() != want {
		t.Errorf("ParseText(max_tokens -3) error = %v, want %s", err, want)
	}
}

// TestContentBeforeRole: a message whose content comes before its role
// (encoding/json's key order) writes what the role-first message writes.
func TestContentBeforeRole(t *testing.T) {
	content := strings.Repeat(`line \"one\"\n`, 300)
	roleFirst := `{"model":"m","messages":[{"role":"system","content":"` + content + `"},{"role":"user","content":"q"}]}`
	contentFirst := `{"messages":[{"content":"` + content + `","role":"system"},{"content":"q","role":"user"}],"model":"m"}`
	var p Parser
	var req Request
	var want, one bytes.Buffer
	if err := p.ParseText(Chat, []byte(roleFirst), false, &want, &req); err != nil {
		t.Fatalf("ParseText(role first) error = %v", err)
	}
	if err := p.ParseText(Chat, []byte(contentFirst), false, &one, &req); err != nil || one.String() != want.String() {
		t.Fatalf("ParseText(content first) = %.60q, %v; want %.60q", one.String(), err, want.String())
	}
}
