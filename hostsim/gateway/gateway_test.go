package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuroute/gpuroute/hostsim/fleetsim"
	"github.com/gpuroute/gpuroute/scoring"
)

func TestParseReplicaFlag(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    ReplicaSpec
		wantErr bool
	}{
		{name: "ok", in: "a=127.0.0.1:8001", want: ReplicaSpec{Name: "a", Address: "127.0.0.1:8001"}},
		{name: "no equals", in: "127.0.0.1:8001", wantErr: true},
		{name: "empty name", in: "=127.0.0.1:8001", wantErr: true},
		{name: "empty address", in: "a=", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseReplicaFlag(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseReplicaFlag(%q) = %+v, %v, want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func FuzzParseReplicaFlag(f *testing.F) {
	for _, s := range []string{"a=127.0.0.1:1", "=", "a==b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseReplicaFlag(s)
		if err == nil && (r.Name == "" || r.Address == "" || r.Name+"="+r.Address != s) {
			t.Errorf("ParseReplicaFlag(%q) = %+v, which does not round-trip", s, r)
		}
	})
}

func TestPluginConfig(t *testing.T) {
	deadline := time.UnixMilli(1767225600000)
	tests := []struct {
		name     string
		replicas []ReplicaSpec
		opts     ConfigOptions
		want     string // compact JSON
		wantErr  bool
	}{
		{name: "one", replicas: []ReplicaSpec{{Name: "a", Address: "127.0.0.1:1"}},
			want: `{"replicas":[{"name":"a","address":"127.0.0.1:1","metrics_cluster":"a-metrics"}]}`},
		{name: "draining with options", replicas: []ReplicaSpec{{Name: "b", Address: "127.0.0.1:2", Hardware: "a100", State: StateDraining, DrainDeadline: deadline}},
			opts: ConfigOptions{TickMillis: 50, StatusPath: "/s"},
			want: `{"replicas":[{"name":"b","address":"127.0.0.1:2","metrics_cluster":"b-metrics","hardware":"a100","state":"draining","drain_deadline_ms":1767225600000}],"status_path":"/s","tick_ms":50}`},
		{name: "duplicate", replicas: []ReplicaSpec{{Name: "a", Address: "x:1"}, {Name: "a", Address: "x:2"}}, wantErr: true},
		{name: "no address", replicas: []ReplicaSpec{{Name: "a"}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := PluginConfig(tt.replicas, tt.opts)
			if (err != nil) != tt.wantErr {
				t.Fatalf("PluginConfig(%+v) error = %v, want error %v", tt.replicas, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			var got bytes.Buffer
			if err := json.Compact(&got, b); err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want {
				t.Errorf("PluginConfig(%+v) = %s, want %s", tt.replicas, got.String(), tt.want)
			}
		})
	}
}

// post sends a JSON body to h and returns the recorded response.
func post(h http.Handler, path, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return w
}

func TestReplicaCompletion(t *testing.T) {
	r := NewReplica(ReplicaOptions{Name: "a", TimeScale: 1e-6})
	tests := []struct {
		name       string
		path, body string
		wantStatus int
		wantText   string
	}{
		{name: "chat", path: PathChatCompletions, body: `{"model":"m0","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`,
			wantStatus: 200, wantText: "t0 t1 t2 "},
		{name: "completion", path: PathCompletions, body: `{"prompt":"hi","max_tokens":2}`, wantStatus: 200, wantText: "t0 t1 "},
		{name: "chat parts", path: PathChatCompletions, body: `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":1}`,
			wantStatus: 200, wantText: "t0 "},
		{name: "no messages", path: PathChatCompletions, body: `{"messages":[]}`, wantStatus: 400},
		{name: "bad json", path: PathCompletions, body: `{`, wantStatus: 400},
		{name: "max_tokens 0", path: PathCompletions, body: `{"prompt":"x","max_tokens":0}`, wantStatus: 400},
		{name: "unknown path", path: "/v1/embeddings", body: `{}`, wantStatus: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := post(r, tt.path, tt.body)
			if w.Code != tt.wantStatus {
				t.Fatalf("POST %s %s = %d %s, want %d", tt.path, tt.body, w.Code, w.Body, tt.wantStatus)
			}
			if tt.wantStatus != 200 {
				return
			}
			var resp struct {
				Choices []struct {
					Text    string `json:"text"`
					Message struct {
						Content string `json:"content"`
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || len(resp.Choices) != 1 {
				t.Fatalf("POST %s body = %s (%v), want one choice", tt.path, w.Body, err)
			}
			got := resp.Choices[0].Text + resp.Choices[0].Message.Content
			if got != tt.wantText || resp.Usage.CompletionTokens != strings.Count(tt.wantText, " ") {
				t.Errorf("POST %s = %q usage %d, want %q", tt.path, got, resp.Usage.CompletionTokens, tt.wantText)
			}
		})
	}
}

// TestReplicaTTFT: through HTTP, a cold prompt, a warm one (same prefix,
// new question) and a first adapter use get the time to first token the
// fleet simulator's engine gives the same shapes, within 10% (the engine's
// modelled time: the wall time is that times TimeScale, plus scheduling).
func TestReplicaTTFT(t *testing.T) {
	const system, question, scale = 1600, 400, 0.02
	hw := scoring.DefaultHardware()
	text := func(c byte, tokens int) string { return strings.Repeat(string(c), tokens*fleetsim.CharsPerToken) }
	seg := func(seed uint64, tokens int) fleetsim.Segment { return fleetsim.Segment{Seed: seed, Tokens: tokens} }
	rows := []struct {
		name    string
		model   string
		prompt  string
		shapes  [][]fleetsim.Segment // the fleet simulator's requests, this one last
		adapter string
		cached  bool
	}{
		{name: "cold", prompt: text('a', system) + text('b', question),
			shapes: [][]fleetsim.Segment{{seg(1, system), seg(2, question)}}},
		{name: "warm", prompt: text('a', system) + text('c', question),
			shapes: [][]fleetsim.Segment{{seg(1, system), seg(2, question)}, {seg(1, system), seg(3, question)}}, cached: true},
		{name: "adapter", model: "sql-lora", prompt: text('d', question), adapter: "sql-lora",
			shapes: [][]fleetsim.Segment{{seg(4, question)}}},
	}
	r := NewReplica(ReplicaOptions{Name: "a", Hardware: hw, TimeScale: scale, Adapters: []string{"sql-lora"}})
	defer r.Close()
	for i, tt := range rows {
		t.Run(tt.name, func(t *testing.T) {
			w := post(r, PathCompletions, `{"model":"`+tt.model+`","prompt":"`+tt.prompt+`","max_tokens":2}`)
			if w.Code != 200 {
				t.Fatalf("POST: %d %s", w.Code, w.Body)
			}
			q := r.Requests()[i]
			var reqs []*fleetsim.Request
			for k, segs := range tt.shapes {
				reqs = append(reqs, fleetsim.NewRequest(k, time.Duration(k)*time.Minute, fleetsim.DefaultModel, tt.adapter, segs, 2, 2))
			}
			p, _ := fleetsim.NewPolicy("round-robin", fleetsim.PolicyOptions{})
			res, err := fleetsim.Run(fleetsim.Config{Replicas: []fleetsim.ReplicaConfig{{Hardware: hw}}}, &fleetsim.Workload{Name: tt.name, Requests: reqs}, p)
			if err != nil {
				t.Fatal(err)
			}
			want := res.TTFTSec[0] // the last request is the fastest: sorted first
			if got := q.EngineTTFT.Seconds(); math.Abs(got-want) > 0.1*want {
				t.Errorf("%s TTFT = %.4f s modelled, the fleet simulator's = %.4f s; want within 10%%", tt.name, got, want)
			}
			if (q.CachedTokens > 0) != tt.cached {
				t.Errorf("%s request cached %d tokens, want cached=%v", tt.name, q.CachedTokens, tt.cached)
			}
			t.Logf("%s: modelled %.4f s (simulator %.4f s); wall %v at time scale %g", tt.name, q.EngineTTFT.Seconds(), want, q.TTFT, scale)
		})
	}
}

// TestReplicaMetrics parses /metrics with Prometheus's own text parser and
// checks the families the plugin reads for vLLM.
func TestReplicaMetrics(t *testing.T) {
	r := NewReplica(ReplicaOptions{Name: "a", TimeScale: 1e-6, Adapters: []string{"lora-1"}})
	post(r, PathCompletions, `{"model":"lora-1","prompt":"`+strings.Repeat("x", 200)+`","max_tokens":2}`)
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, PathMetrics, nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(w.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	// vLLM V1's names (vllm-project/vllm docs/design/metrics.md), the ones
	// the plugin's metrics package reads for vLLM.
	const metricGenTokens = "vllm:generation_tokens_total"
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:cache_config_info", "vllm:lora_requests_info", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
		"vllm:prompt_tokens_total", metricGenTokens} {
		if fams[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if got := fams[metricGenTokens].GetMetric()[0].GetCounter().GetValue(); got != 2 {
		t.Errorf("%s = %v, want 2", metricGenTokens, got)
	}
}

// FuzzReplicaRequest: no body crashes the replica; it answers 200 or a 4xx.
func FuzzReplicaRequest(f *testing.F) {
	for _, s := range []string{`{"prompt":"x","max_tokens":2}`, `{"messages":[{"role":"user","content":"x"}],"stream":true,"max_tokens":2}`,
		`{"messages":[{"content":[{"text":1}]}]}`, `{"prompt":["a","b"]}`, `{"max_tokens":-1}`, `null`} {
		f.Add(s, true)
		f.Add(s, false)
	}
	r := NewReplica(ReplicaOptions{TimeScale: 1e-9})
	f.Fuzz(func(t *testing.T, body string, chat bool) {
		path := PathCompletions
		if chat {
			path = PathChatCompletions
		}
		w := post(r, path, body)
		if w.Code != 200 && (w.Code < 400 || w.Code > 499) {
			t.Errorf("POST %s %q = %d, want 200 or 4xx", path, body, w.Code)
		}
	})
}

// newTestGateway starts a gateway over the given replicas (no file watch).
func newTestGateway(t *testing.T, specs []ReplicaSpec, opts ConfigOptions) *Gateway {
	t.Helper()
	cfg, err := PluginConfig(specs, opts)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(context.Background(), Options{WASM: readWASM(t), Workers: 2, PluginConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	return gw
}

func TestGatewayLocalRepliesAndReload(t *testing.T) {
	rep := NewReplica(ReplicaOptions{Name: "a", TimeScale: 1e-3})
	rs, err := Serve("127.0.0.1:0", rep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	specs := []ReplicaSpec{{Name: "a", Address: rs.Addr}}
	opts := ConfigOptions{TickMillis: 50, StatusPath: "/gpuroute/status"}
	gw := newTestGateway(t, specs, opts)
	const body = `{"prompt":"hello","max_tokens":2}`

	w := post(gw, PathCompletions, body)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"text":"t0 t1 "`) || !strings.Contains(w.Body.String(), `"completion_tokens":2`) {
		t.Fatalf("completion through the gateway = %d %s, want 200 with text and usage", w.Code, w.Body)
	}
	w = httptest.NewRecorder()
	gw.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/gpuroute/status", nil))
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"a"`) {
		t.Errorf("status endpoint = %d %s, want 200 naming replica a", w.Code, w.Body)
	}

	// A configuration the plugin refuses keeps the last good one.
	gen := gw.Generation()
	if err := gw.Reconfigure([]byte(`{"replicas":[],"tick_ms":-1}`)); err == nil {
		t.Error("Reconfigure(bad) = nil, want the plugin's refusal")
	}
	if gw.Generation() != gen {
		t.Errorf("Generation() = %d after a refused configuration, want %d", gw.Generation(), gen)
	}
	if w := post(gw, PathCompletions, body); w.Code != 200 {
		t.Errorf("after a refused configuration: %d %s, want 200", w.Code, w.Body)
	}

	// Every replica drained: the plugin answers 503 itself, OpenAI-style.
	specs[0].State = StateDrained
	cfg, _ := PluginConfig(specs, opts)
	if err := gw.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	w = post(gw, PathCompletions, body)
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if w.Code != http.StatusServiceUnavailable || json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Error.Message == "" {
		t.Errorf("with every replica drained = %d %s, want 503 with an OpenAI error", w.Code, w.Body)
	}
	if n := len(rep.Requests()); n != 2 {
		t.Errorf("replica saw %d requests, want 2 (the 503 is local)", n)
	}
}

// TestGatewayClockFollowsWallTime: the guest's clock is the host's virtual
// clock, which the gateway keeps on wall time.
func TestGatewayClockFollowsWallTime(t *testing.T) {
	gw := newTestGateway(t, []ReplicaSpec{{Name: "a", Address: "127.0.0.1:9"}}, ConfigOptions{TickMillis: 50})
	time.Sleep(60 * time.Millisecond)
	if skew := time.Since(gw.Host().WallTime()); skew < 0 || skew > 250*time.Millisecond {
		t.Errorf("virtual wall time is %v behind real time, want within [0, 250ms]", skew)
	}
}

// benchGateway starts a replica running its model scale times real time
// and a gateway in front of it, for the benchmark's lifetime, and returns
// both base URLs.
func benchGateway(b *testing.B, scale float64) (direct, front string) {
	rep := NewReplica(ReplicaOptions{Name: "a", TimeScale: scale})
	b.Cleanup(rep.Close)
	rs, err := Serve("127.0.0.1:0", rep)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rs.Close() })
	cfg, _ := PluginConfig([]ReplicaSpec{{Name: "a", Address: rs.Addr}}, ConfigOptions{TickMillis: 100})
	gw, err := New(context.Background(), Options{WASM: readWASM(b), Workers: 2, PluginConfig: cfg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gw.Close() })
	gs, err := Serve("127.0.0.1:0", gw)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gs.Close() })
	return rs.URL(), gs.URL()
}

// benchPost sends a chat completion to base and reads the whole answer;
// it returns the answer's length.
func benchPost(b *testing.B, base, body string) int64 {
	resp, err := http.Post(base+PathChatCompletions, "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
	return n
}

// BenchmarkGatewayRequest measures one non-streamed completion through the
// gateway (plugin callbacks, upstream hop, response callbacks) against the
// same request sent to the replica directly, over loopback.
func BenchmarkGatewayRequest(b *testing.B) {
	direct, front := benchGateway(b, 1e-9)
	body := `{"model":"` + testModel + `","messages":[{"role":"user","content":"` + strings.Repeat("hello ", 200) + `"}],"max_tokens":4}`
	for _, bc := range []struct{ name, url string }{{"direct", direct}, {"gateway", front}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				benchPost(b, bc.url, body)
			}
		})
	}
}

// BenchmarkGatewayStream measures a stream of 1,000 tokens through the
// gateway against the same stream from the replica directly. The replica
// paces its tokens (a hundredth of an H100's decode step each), so they
// arrive as separate chunks, each of which passes the plugin and goes
// downstream as it comes: the gateway's bytes per stream must stay within
// a small multiple of the direct ones, not grow with the square of the
// stream's length.
func BenchmarkGatewayStream(b *testing.B) {
	direct, front := benchGateway(b, 0.01)
	body := `{"model":"` + testModel + `","messages":[{"role":"user","content":"hello"}],"max_tokens":1000,"stream":true}`
	for _, bc := range []struct{ name, url string }{{"direct", direct}, {"gateway", front}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.ReportMetric(float64(benchPost(b, bc.url, body)), "body-bytes")
			}
		})
	}
}

// FuzzRebindReplicas: any input gives an error or valid JSON whose
// replicas named in the map carry the new address.
func FuzzRebindReplicas(f *testing.F) {
	for _, s := range []string{`{"replicas":[{"name":"sim-0","address":"x:1"}]}`, `{"replicas":[{"name":1}]}`, `{}`, `[]`, `{"replicas":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cfg string) {
		out, rebound, err := RebindReplicas([]byte(cfg), map[string]string{"sim-0": "127.0.0.1:2"})
		if err != nil {
			return
		}
		var got struct {
			Replicas []map[string]any `json:"replicas"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("RebindReplicas(%q) = %q, not JSON: %v", cfg, out, err)
		}
		for _, r := range got.Replicas {
			if r["name"] == "sim-0" && r["address"] != "127.0.0.1:2" {
				t.Errorf("RebindReplicas(%q) left sim-0 at %v (rebound %v)", cfg, r["address"], rebound)
			}
		}
	})
}
