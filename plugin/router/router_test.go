package router

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Configurations used across tests.
const (
	cfgTwo = `{"replicas":[` +
		`{"name":"vllm-0","address":"10.0.0.1:8000","metrics_cluster":"vllm-0-metrics","engine":"vllm","hardware":"h100","state":"active"},` +
		`{"name":"vllm-1","address":"10.0.0.2:8000"}],"tick_ms":250}`
	cfgOther = `{"replicas":[{"name":"sglang-0","address":"10.0.1.1:30000","engine":"sglang"}]}`
	cfgMixed = `{"replicas":[` +
		`{"name":"a","address":"10.0.0.1:8000"},` +
		`{"name":"b","address":"10.0.0.2:8000","state":"draining","drain_deadline_ms":1767225600000},` +
		`{"name":"c","address":"10.0.0.3:8000"},` +
		`{"name":"d","address":"10.0.0.4:8000","state":"drained"}]}`
	cfgFour = `{"replicas":[` +
		`{"name":"a","address":"10.0.0.1:8000"},{"name":"b","address":"10.0.0.2:8000"},` +
		`{"name":"c","address":"10.0.0.3:8000"},{"name":"d","address":"10.0.0.4:8000"}]}`
	cfgNone = `{"replicas":[` +
		`{"name":"b","address":"10.0.0.2:8000","state":"draining"},` +
		`{"name":"d","address":"10.0.0.4:8000","state":"drained"}]}`
)

var baseRequest = [][2]string{
	{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "gateway"},
	{"content-type", "application/json"},
}

// chatBody is a chat completion request with one user message.
func chatBody(content string) string {
	b, _ := json.Marshal(map[string]any{
		"model":    "llama-3-8b",
		"messages": []map[string]string{{"role": "user", "content": content}},
	})
	return string(b)
}

// destinations returns every value of HeaderDestination in hdrs (any case).
func destinations(hdrs [][2]string) []string {
	var out []string
	for _, h := range hdrs {
		if strings.EqualFold(h[0], HeaderDestination) {
			out = append(out, h[1])
		}
	}
	return out
}

// route sends one base request and returns its single destination.
func route(t *testing.T, d driver) string {
	t.Helper()
	got, action, local := d.request(baseRequest, "")
	dst := destinations(got)
	if action != types.ActionContinue || local != nil || len(dst) != 1 {
		t.Fatalf("request() = headers %q, action %v, local %+v; want one destination, Continue, no local reply", got, action, local)
	}
	return dst[0]
}

func TestConfigure(t *testing.T) {
	tests := []struct {
		name    string
		cfg     string
		ok      bool
		wantLog string // substring of an error log line when refused
	}{
		{name: "accepted", cfg: cfgTwo, ok: true},
		{name: "bad address", cfg: `{"replicas":[{"name":"a","address":"10.0.0.1:1"},{"name":"b","address":"10.0.0.2:1"},{"name":"c","address":"10.0.0.1"}]}`,
			wantLog: `config: replicas[2].address "10.0.0.1" is not ip:port`},
		{name: "unknown key", cfg: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}],"tick":1}`,
			wantLog: `config: unknown key "tick"`},
		{name: "not json", cfg: `replicas: []`, wantLog: `config: want a JSON object`},
		{name: "empty", cfg: ``, wantLog: `config: want a JSON object`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eachLeg(t, func(t *testing.T, d driver) {
				if got := d.configure(tc.cfg); got != tc.ok {
					t.Fatalf("configure(%s) = %v, want %v", tc.cfg, got, tc.ok)
				}
				if tc.ok {
					if p := d.tickPeriodMillis(); p != firstTickMillis {
						t.Errorf("tick period after configure(%s) = %d ms, want %d", tc.cfg, p, firstTickMillis)
					}
					d.tick()
					if p := d.tickPeriodMillis(); p != 250 {
						t.Errorf("tick period after configure(%s) and a tick = %d ms, want 250", tc.cfg, p)
					}
					return
				}
				logs := d.errorLogs()
				for _, l := range logs {
					if strings.Contains(l, tc.wantLog) {
						return
					}
				}
				t.Errorf("error logs after configure(%s) = %q, want a line containing %q", tc.cfg, logs, tc.wantLog)
			})
		})
	}
}

func TestReconfigure(t *testing.T) {
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfgOther) {
			t.Fatalf("configure(cfgOther) = false, want true")
		}
		if got := route(t, d); got != "10.0.1.1:30000" {
			t.Fatalf("destination under cfgOther = %q, want 10.0.1.1:30000", got)
		}
		if d.configure(`{"replicas":[{"name":"x","address":"nowhere"}]}`) {
			t.Fatalf("configure(bad address) = true, want false")
		}
		if got := route(t, d); got != "10.0.1.1:30000" {
			t.Errorf("destination after a refused reconfigure = %q, want the previous root's 10.0.1.1:30000", got)
		}
		if !d.configure(cfgTwo) {
			t.Fatalf("configure(cfgTwo) = false, want true")
		}
		if a := route(t, d); a != "10.0.0.1:8000" && a != "10.0.0.2:8000" {
			t.Errorf("destination after reconfigure = %q; want one of cfgTwo's replicas", a)
		}
	})
}

func TestSkipsClosedReplicas(t *testing.T) {
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfgMixed) {
			t.Fatalf("configure(cfgMixed) = false, want true")
		}
		seen := map[string]int{}
		for i := range 40 {
			got, _, local := d.request(baseRequest, chatBody("prompt "+strconv.Itoa(i)+strings.Repeat(" x", 100)))
			if local != nil {
				t.Fatalf("request %d got a local reply %+v", i, local)
			}
			for _, dst := range destinations(got) {
				seen[dst]++
			}
		}
		if seen["10.0.0.2:8000"] != 0 || seen["10.0.0.4:8000"] != 0 {
			t.Errorf("destinations = %v; the draining 10.0.0.2 and drained 10.0.0.4 must get nothing", seen)
		}
		if seen["10.0.0.1:8000"] == 0 || seen["10.0.0.3:8000"] == 0 || seen["10.0.0.1:8000"]+seen["10.0.0.3:8000"] != 40 {
			t.Errorf("destinations = %v; want all 40 spread over 10.0.0.1 and 10.0.0.3", seen)
		}
		d.tick() // routed requests' counts reach the host at the tick
		if n, ok := d.counter(statDecisions); !ok || n != 40 {
			t.Errorf("counter %s = %d, %v; want 40", statDecisions, n, ok)
		}
	})
}

// TestPrefixAffinity: requests sharing a long prefix go to the replica that
// served it, while unrelated prompts spread over the fleet.
func TestPrefixAffinity(t *testing.T) {
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfgFour) {
			t.Fatalf("configure(cfgFour) = false, want true")
		}
		system := strings.Repeat("You are a careful assistant for the payments team. ", 200) // ~10k chars
		home := ""
		for i := range 8 {
			got, _, _ := d.request(baseRequest, chatBody(system+"question "+strconv.Itoa(i)))
			dst := destinations(got)
			if len(dst) != 1 {
				t.Fatalf("request %d destinations = %q, want one", i, dst)
			}
			if home == "" {
				home = dst[0]
			} else if dst[0] != home {
				t.Fatalf("request %d with the shared prefix went to %s, want its home %s", i, dst[0], home)
			}
		}
		spread := map[string]bool{}
		for i := range 32 {
			got, _, _ := d.request(baseRequest, chatBody(strconv.Itoa(i)+strings.Repeat(" unrelated", 300)))
			for _, dst := range destinations(got) {
				spread[dst] = true
			}
		}
		if len(spread) < 3 {
			t.Errorf("32 unrelated prompts went to %d replicas, want them spread over at least 3 of 4", len(spread))
		}
		d.tick() // routed requests' counts reach the host at the tick
		if n, ok := d.counter(statPrefixHitTokens); !ok || n == 0 {
			t.Errorf("counter %s = %d, %v; want > 0 after repeated prefixes", statPrefixHitTokens, n, ok)
		}
	})
}

// TestPromptMemo: a long system message met again is replayed from the
// memo (counted), and affinity is what decoding it would give: every
// request with the shared system message goes to its first one's replica.
func TestPromptMemo(t *testing.T) {
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfgFour) {
			t.Fatalf("configure(cfgFour) = false, want true")
		}
		system := strings.Repeat("You are a careful assistant for the payments team.\n", 200) // ~10k chars
		home := ""
		for i := range 8 {
			b, _ := json.Marshal(map[string]any{"model": "llama-3-8b", "messages": []map[string]string{
				{"role": "system", "content": system}, {"role": "user", "content": "question " + strconv.Itoa(i)}}})
			got, _, _ := d.request(baseRequest, string(b))
			dst := destinations(got)
			if len(dst) != 1 || home != "" && dst[0] != home {
				t.Fatalf("request %d destinations = %q, want one, the home %q", i, dst, home)
			}
			home = dst[0]
		}
		d.tick() // routed requests' counts reach the host at the tick
		if n, ok := d.counter(statMemoReplays); !ok || n != 7 {
			t.Errorf("counter %s = %d, %v; want 7 (every request after the first)", statMemoReplays, n, ok)
		}
	})
}

// TestBodyNotJSON: a body that is not JSON is routed on load alone and
// counted, never answered with an error.
func TestBodyNotJSON(t *testing.T) {
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfgTwo) {
			t.Fatalf("configure(cfgTwo) = false, want true")
		}
		for _, body := range []string{"not json", `{"messages":[{"role":"user","content":"no model"}]}`, `{"model":`} {
			got, action, local := d.request(baseRequest, body)
			if local != nil || action != types.ActionContinue || len(destinations(got)) != 1 {
				t.Errorf("request(body %q) = action %v, local %+v, destinations %q; want Continue and one destination", body, action, local, destinations(got))
			}
		}
		if n, ok := d.counter(statBodyUnparsed); !ok || n != 3 {
			t.Errorf("counter %s = %d, %v; want 3", statBodyUnparsed, n, ok)
		}
	})
}

// TestStatusEndpoint: off by default (the path is routed like any other);
// when configured, answered locally with the fleet and nothing echoed.
func TestStatusEndpoint(t *testing.T) {
	statusReq := [][2]string{{":method", "GET"}, {":path", "/gpuroute/status?x=<script>"}, {":authority", "gw"}}
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfgTwo) {
			t.Fatalf("configure(cfgTwo) = false, want true")
		}
		if _, _, local := d.request(statusReq, ""); local != nil {
			t.Fatalf("status path without status_path configured got local reply %+v, want it routed", local)
		}
		cfg := strings.Replace(cfgTwo, `"tick_ms":250`, `"tick_ms":250,"status_path":"/gpuroute/status"`, 1)
		if !d.configure(cfg) {
			t.Fatalf("configure(%s) = false", cfg)
		}
		_, _, local := d.request(statusReq, "")
		if local == nil || local.status != 200 {
			t.Fatalf("status request = %+v, want a local 200", local)
		}
		var st struct {
			Replicas []struct {
				Name, Address, State string
				Healthy              bool
			}
		}
		if err := json.Unmarshal([]byte(local.body), &st); err != nil {
			t.Fatalf("status body %q is not JSON: %v", local.body, err)
		}
		if len(st.Replicas) != 2 || st.Replicas[0].Name != "vllm-0" || st.Replicas[1].Address != "10.0.0.2:8000" || st.Replicas[0].State != "active" {
			t.Errorf("status = %+v, want vllm-0 and vllm-1 (10.0.0.2:8000), active", st)
		}
		if strings.Contains(local.body, "script") {
			t.Errorf("status body echoes request data: %q", local.body)
		}
	})
}

func TestClientDestinationReplaced(t *testing.T) {
	const evil = "169.254.169.254:80"
	tests := []struct {
		name  string
		extra [][2]string
	}{
		{name: "absent"},
		{name: "lowercase", extra: [][2]string{{"x-gateway-destination-endpoint", evil}}},
		{name: "mixed case", extra: [][2]string{{"X-Gateway-Destination-Endpoint", evil}}},
		{name: "repeated", extra: [][2]string{{"x-gateway-destination-endpoint", evil}, {"x-other", "1"}, {"x-gateway-destination-endpoint", evil}, {"X-GATEWAY-DESTINATION-ENDPOINT", "10.9.9.9:1"}}},
		{name: "list value", extra: [][2]string{{"x-gateway-destination-endpoint", evil + "," + evil}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eachLeg(t, func(t *testing.T, d driver) {
				if !d.configure(cfgOther) {
					t.Fatalf("configure(cfgOther) = false, want true")
				}
				in := append(append([][2]string(nil), baseRequest...), tc.extra...)
				got, action, local := d.request(in, "")
				dst := destinations(got)
				if action != types.ActionContinue || local != nil || len(dst) != 1 || dst[0] != "10.0.1.1:30000" {
					t.Errorf("request(%q) = destinations %q, action %v, local %+v; want exactly [10.0.1.1:30000], Continue", in, dst, action, local)
				}
			})
		})
	}
}

// TestModelNotServed: a request goes only to a replica that serves its
// base model (an adapter's is the one configured for it), a model no
// replica serves gets a 404 in OpenAI's shape, and a model whose replicas
// are all closed a 503.
func TestModelNotServed(t *testing.T) {
	const cfg = `{"replicas":[` +
		`{"name":"big","address":"10.0.0.1:8000","hardware":"h100","model_profile":"llama-3-70b","tensor_parallel":4,"models":["llama-70b"]},` +
		`{"name":"small","address":"10.0.0.2:8000","hardware":"l40s","models":["llama-8b"]},` +
		`{"name":"old","address":"10.0.0.3:8000","models":["llama-2"],"state":"drained"}],` +
		`"adapters":{"sql-lora":"llama-8b"}}`
	body := func(model string) string {
		b, _ := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": "hello"}}})
		return string(b)
	}
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfg) {
			t.Fatalf("configure(two models) = false, want true")
		}
		for _, tt := range []struct{ model, want string }{
			{"llama-70b", "10.0.0.1:8000"}, {"llama-8b", "10.0.0.2:8000"}, {"sql-lora", "10.0.0.2:8000"}, {"llama-70b", "10.0.0.1:8000"},
		} {
			got, action, local := d.request(baseRequest, body(tt.model))
			if dst := destinations(got); action != types.ActionContinue || local != nil || len(dst) != 1 || dst[0] != tt.want {
				t.Fatalf("request(model %q) = destinations %q, action %v, local %+v; want [%s]", tt.model, dst, action, local, tt.want)
			}
		}
		for _, tt := range []struct {
			model      string
			status     uint32
			typ        string
			retryAfter bool // retrying a model nobody serves cannot help
		}{{"gpt-5", 404, "invalid_request_error", false}, {"llama-2", 503, "service_unavailable", true}} {
			_, action, local := d.request(baseRequest, body(tt.model))
			if action != types.ActionPause || local == nil || local.status != tt.status {
				t.Fatalf("request(model %q) = action %v, local %+v; want Pause and a %d", tt.model, action, local, tt.status)
			}
			if got := headerValue(local.headers, "retry-after") != ""; got != tt.retryAfter {
				t.Errorf("request(model %q): %d headers %q, Retry-After present %v, want %v", tt.model, tt.status, local.headers, got, tt.retryAfter)
			}
			var reply struct {
				Error struct {
					Type string `json:"type"`
					Code any    `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(local.body), &reply); err != nil || reply.Error.Type != tt.typ {
				t.Errorf("request(model %q) body %s (%v), want error type %s", tt.model, local.body, err, tt.typ)
			}
			if tt.status == 503 && !strings.Contains(local.body, "2 serving other models, 0 unhealthy, 1 draining") {
				t.Errorf("503 body %s, want the replicas serving other models counted", local.body)
			}
			if tt.status == 404 && reply.Error.Code != "model_not_found" {
				t.Errorf("404 body %s, want code model_not_found", local.body)
			}
		}
		if n, ok := d.counter(statModelNotFound); !ok || n != 1 {
			t.Errorf("counter %s = %d, %v; want 1", statModelNotFound, n, ok)
		}
	})
}

func TestNoEligibleReplica(t *testing.T) {
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfgNone) {
			t.Fatalf("configure(cfgNone) = false, want true")
		}
		in := append(append([][2]string(nil), baseRequest...), [2]string{HeaderDestination, "10.9.9.9:1"})
		_, action, local := d.request(in, "")
		if action != types.ActionPause || local == nil || local.status != 503 {
			t.Fatalf("request with no eligible replica = action %v, local %+v; want Pause and a 503", action, local)
		}
		var body struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(local.body), &body); err != nil {
			t.Fatalf("503 body %q is not JSON: %v", local.body, err)
		}
		if body.Error.Type != "service_unavailable" || body.Error.Code != 503 || body.Error.Message == "" {
			t.Errorf("503 body = %+v, want type service_unavailable, code 503, a message", body.Error)
		}
		ct, retry := "", ""
		for _, h := range local.headers {
			switch {
			case strings.EqualFold(h[0], "content-type"):
				ct = h[1]
			case strings.EqualFold(h[0], headerRetryAfter):
				retry = h[1]
			}
		}
		if ct != "application/json" {
			t.Errorf("503 content-type = %q, want application/json", ct)
		}
		// Every replica is draining or drained: nothing comes back soon.
		if retry != "60" {
			t.Errorf("503 %s = %q, want \"60\" (every replica closed)", headerRetryAfter, retry)
		}
		if n, ok := d.counter(statUnavailable); !ok || n != 1 {
			t.Errorf("counter %s = %d, %v; want 1", statUnavailable, n, ok)
		}
	})
}

// TestRetrySec: a wait becomes whole seconds, rounded up, within [1, 60].
func TestRetrySec(t *testing.T) {
	tests := []struct {
		name string
		wait float64
		want int64
	}{
		{name: "none", wait: 0, want: 1},
		{name: "negative", wait: -3, want: 1},
		{name: "fraction", wait: 0.2, want: 1},
		{name: "rounded up", wait: 2.01, want: 3},
		{name: "whole", wait: 7, want: 7},
		{name: "bound", wait: 90, want: 60},
		{name: "infinite", wait: math.Inf(1), want: 60},
		{name: "nan", wait: math.NaN(), want: 60},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := retrySec(tc.wait); got != tc.want {
				t.Errorf("retrySec(%v) = %d, want %d", tc.wait, got, tc.want)
			}
		})
	}
}
