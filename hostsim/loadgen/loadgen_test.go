package loadgen

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim/fleetsim"
	"github.com/gpuroute/gpuroute/hostsim/gateway"
	"github.com/gpuroute/gpuroute/scoring"
)

// replicas starts n simulated replicas running their model scale times
// faster than real time, and returns their base URLs.
func replicas(t *testing.T, n int, scale float64) []string {
	t.Helper()
	hw, _ := scoring.LookupHardware("h100")
	var urls []string
	for i := range n {
		srv := httptest.NewServer(gateway.NewReplica(gateway.ReplicaOptions{Name: "r" + string(rune('0'+i)), Hardware: hw, TimeScale: scale}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	return urls
}

// TestRunThroughProxies drives two simulated replicas through each proxy
// policy with a short few-prefixes slice: every request completes, both
// replicas answer, the prompts' shared system prompts hit the replicas'
// caches, and the counts past the warm-up are the workload's.
func TestRunThroughProxies(t *testing.T) {
	const scale = 0.05
	w, err := fleetsim.Generate("few-prefixes", fleetsim.WorkloadOptions{Seed: 1, Duration: 80 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	after := w.SteadyRequests()
	for _, policy := range []string{ProxyRoundRobin, ProxyLeastRequest} {
		t.Run(policy, func(t *testing.T) {
			ups := replicas(t, 2, scale)
			p, err := NewProxy(policy, ups)
			if err != nil {
				t.Fatal(err)
			}
			front := httptest.NewServer(p)
			defer front.Close()
			var metrics []string
			for _, u := range ups {
				metrics = append(metrics, u+"/metrics")
			}
			rep, err := Run(context.Background(), w, 1, Options{URL: front.URL, Label: policy, TimeScale: scale, MetricsURLs: metrics})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Completed != len(w.Requests) || rep.Failed != 0 {
				t.Fatalf("Run(%s) completed %d, failed %d of %d; first error %q", policy, rep.Completed, rep.Failed, len(w.Requests), firstErr(rep))
			}
			if len(rep.Placement) != 2 || rep.Placement["unknown"] != 0 {
				t.Errorf("Run(%s) placement = %v, want both replicas named", policy, rep.Placement)
			}
			if rep.Steady.Requests != after {
				t.Errorf("Run(%s) steady requests = %d, want %d", policy, rep.Steady.Requests, after)
			}
			if !(rep.Steady.WarmShare > 0.5) || !(rep.MetricsHitRate > 0.3) {
				t.Errorf("Run(%s) steady warm share %.3f, metrics hit rate %.3f; want the shared system prompts cached", policy, rep.Steady.WarmShare, rep.MetricsHitRate)
			}
			if !(rep.TTFTP50Sec > 0) || rep.TTFTP99Sec < rep.TTFTP50Sec || rep.E2EP50Sec < rep.TTFTP50Sec {
				t.Errorf("Run(%s) TTFT p50 %.3f p99 %.3f, e2e p50 %.3f: want 0 < p50 <= p99 and e2e >= ttft", policy, rep.TTFTP50Sec, rep.TTFTP99Sec, rep.E2EP50Sec)
			}
		})
	}
}

func firstErr(r *Report) string {
	for _, o := range r.Outcomes {
		if o.Err != "" {
			return o.Err
		}
	}
	return ""
}

func TestRequestBody(t *testing.T) {
	segs := []fleetsim.Segment{{Seed: 3, Tokens: 8}, {Seed: 5, Tokens: 2}}
	r := fleetsim.NewRequest(0, 0, fleetsim.DefaultModel, "", segs, 64, 10)
	tests := []struct {
		name string
		o    Options
		want []string
	}{
		{"chat, pinned output", Options{API: APIChat}, []string{`"role":"system"`, `"role":"user"`, `"max_tokens":10`, `"ignore_eos":true`, `"stream":true`}},
		{"chat, the workload's bound", Options{API: APIChat, WorkloadMaxTokens: true}, []string{`"max_tokens":64`, `"min_tokens":10`}},
		{"completions", Options{API: APICompletions}, []string{`"prompt":"`, `"max_tokens":10`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, path := requestBody(r, &tt.o)
			for _, s := range tt.want {
				if !strings.Contains(string(b), s) {
					t.Errorf("requestBody(%s) = %s (path %s), want it to contain %s", tt.name, b, path, s)
				}
			}
		})
	}
}

func TestSample(t *testing.T) {
	tests := []struct {
		line string
		name string
		v    float64
		ok   bool
	}{
		{`vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1234`, metricHits, 1234, true},
		{`vllm:prefix_cache_queries_total 5e3`, metricQueries, 5000, true},
		{`# TYPE vllm:prefix_cache_hits_total counter`, "", 0, false},
		{`broken{`, "", 0, false},
	}
	for _, tt := range tests {
		name, v, ok := sample(tt.line)
		if ok != tt.ok || (ok && (name != tt.name || v != tt.v)) {
			t.Errorf("sample(%q) = %q, %v, %v; want %q, %v, %v", tt.line, name, v, ok, tt.name, tt.v, tt.ok)
		}
	}
}
