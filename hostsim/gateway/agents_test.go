package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/plugin/openai"
)

// agentBodies are a Messages and a Responses request with the same long
// system prompt (many KV blocks), asking for 3 tokens.
var agentBodies = map[string]func(stream bool) string{
	PathMessages: func(stream bool) string {
		return `{"model":"m","max_tokens":3,"stream":` + jsonBool(stream) + `,"system":"` + strings.Repeat("s", 600) +
			`","messages":[{"role":"user","content":[{"type":"text","text":"hello"}]}]}`
	},
	PathResponses: func(stream bool) string {
		return `{"model":"m","max_output_tokens":3,"stream":` + jsonBool(stream) + `,"instructions":"` + strings.Repeat("s", 600) +
			`","input":"hello"}`
	},
}

func jsonBool(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// TestReplicaAgentAPIs: over HTTP, the replica answers /v1/messages and
// /v1/responses, streamed and whole, in shapes the plugin's response reader
// parses: the answer's text, the output count and the cached prompt tokens
// the engine reported (non-zero on a repeated prompt) all come back.
func TestReplicaAgentAPIs(t *testing.T) {
	tests := []struct {
		name   string
		path   string
		kind   openai.Kind
		stream bool
	}{
		{name: "messages streamed", path: PathMessages, kind: openai.Messages, stream: true},
		{name: "messages whole", path: PathMessages, kind: openai.Messages},
		{name: "responses streamed", path: PathResponses, kind: openai.Responses, stream: true},
		{name: "responses whole", path: PathResponses, kind: openai.Responses},
	}
	wantAnswer := "assistant" + string(openai.SepRole) + "t0 t1 t2 " + string(openai.SepMessage)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReplica(ReplicaOptions{Name: "a", TimeScale: 1e-6})
			defer r.Close()
			srv := httptest.NewServer(r)
			defer srv.Close()
			body := agentBodies[tt.path](tt.stream)
			for turn := range 2 { // the second finds the first's prompt cached
				resp, err := http.Post(srv.URL+tt.path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("POST %s %s = %d %s (%v), want 200", tt.path, body, resp.StatusCode, b, err)
				}
				if got := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"); got != tt.stream {
					t.Errorf("POST %s stream %v: Content-Type %q", tt.path, tt.stream, resp.Header.Get("Content-Type"))
				}
				qs := r.Requests()
				rec := qs[len(qs)-1]
				if turn == 1 && rec.CachedTokens == 0 {
					t.Fatalf("repeated prompt: replica cached %d tokens, want > 0", rec.CachedTokens)
				}
				var answer bytes.Buffer
				got := readAnswer(t, tt.kind, tt.stream, b, &answer)
				want := openai.Usage{PromptTokens: int64(rec.PromptTokens), CompletionTokens: 3,
					CachedTokens: int64(rec.CachedTokens), HasCached: true}
				if got != want {
					t.Errorf("turn %d: usage read from %s = %+v, want %+v", turn, b, got, want)
				}
				if answer.String() != wantAnswer {
					t.Errorf("turn %d: answer read from %s = %q, want %q", turn, b, answer.String(), wantAnswer)
				}
				if tt.stream {
					checkEventNames(t, b)
				}
			}
		})
	}
}

// readAnswer reads a response body as the plugin does, recording the
// answer into w, and returns the usage it read; it fails the test unless
// the body had usage and, streamed, ended with its final event.
func readAnswer(t *testing.T, kind openai.Kind, stream bool, body []byte, w io.Writer) openai.Usage {
	t.Helper()
	var c openai.StreamCounter
	c.Reset()
	c.Record(kind, w)
	if !stream {
		rp := c.Reply(body)
		if !rp.HasUsage || kind == openai.Responses && !rp.HasResponseID {
			t.Fatalf("Reply(%s) = %+v, want usage (and a Responses id)", body, rp)
		}
		return rp.Usage
	}
	_, _ = c.Write(body)
	if !c.Done || !c.Finished || !c.HasUsage || kind == openai.Responses && !c.HasResponseID {
		t.Fatalf("StreamCounter over %s: Done %v Finished %v HasUsage %v HasResponseID %v, want all true",
			body, c.Done, c.Finished, c.HasUsage, c.HasResponseID)
	}
	if _, whole := c.Answer(); !whole {
		t.Errorf("StreamCounter over %s: answer not whole", body)
	}
	return openai.Usage{PromptTokens: c.UsagePromptTokens, CompletionTokens: c.UsageCompletionTokens,
		CachedTokens: c.UsageCachedTokens, HasCached: c.HasCached}
}

// checkEventNames holds each SSE event's "event:" name to its data's "type",
// as both APIs name their events.
func checkEventNames(t *testing.T, body []byte) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			name = n
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Type != name {
			t.Errorf("event %q has data %s (%v), want type %q", name, data, err, name)
		}
		name = ""
	}
}

// TestReplicaAgentRequestErrors: a Messages or Responses body the engines
// refuse gets a 400 that says why.
func TestReplicaAgentRequestErrors(t *testing.T) {
	r := NewReplica(ReplicaOptions{Name: "a", TimeScale: 1e-6})
	defer r.Close()
	tests := []struct {
		name, path, body, want string
	}{
		{name: "messages without max_tokens", path: PathMessages,
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, want: "max_tokens"},
		{name: "responses max_output_tokens 0", path: PathResponses,
			body: `{"model":"m","input":"hi","max_output_tokens":0}`, want: "max_tokens must be in [1, 65536], got 0"},
		{name: "not JSON", path: PathResponses, body: `{`, want: "replica: openai:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := post(r, tt.path, tt.body)
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), tt.want) {
				t.Errorf("POST %s %s = %d %s, want 400 saying %q", tt.path, tt.body, w.Code, w.Body, tt.want)
			}
		})
	}
}

// TestGatewayAgentAPIs: through the gateway and the plugin, a Messages and
// a Responses conversation's repeated turn reaches a replica that had its
// prompt cached, and the answer streams back intact.
func TestGatewayAgentAPIs(t *testing.T) {
	f := newFixture(t, 2)
	for _, tt := range []struct {
		name string
		path string
		kind openai.Kind
	}{
		{name: "messages", path: PathMessages, kind: openai.Messages},
		{name: "responses", path: PathResponses, kind: openai.Responses},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := strings.Replace(agentBodies[tt.path](true), `"m"`, `"`+testModel+`"`, 1)
			body = strings.Replace(body, "hello", tt.name, 1)
			var got openai.Usage
			for turn := range 2 {
				resp, err := http.Post(f.srv.URL()+tt.path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderReplica) == "" {
					t.Fatalf("turn %d: POST %s via the gateway = %d %s (%v), want 200 from a replica", turn, tt.path, resp.StatusCode, b, err)
				}
				got = readAnswer(t, tt.kind, true, b, io.Discard)
			}
			if got.CachedTokens == 0 || got.CompletionTokens != 3 {
				t.Errorf("second turn's usage = %+v, want cached tokens > 0 and 3 completion tokens", got)
			}
		})
	}
}
