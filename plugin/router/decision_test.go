package router

import (
	"slices"
	"testing"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/openai"
	"github.com/gpuroute/gpuroute/scoring"
)

// Native tests of the request path's decision: the steps of stream.route,
// OnHttpResponseBody and release that are not host calls (the native host
// binding forwards to the SDK's proxytest, which allocates by design, so an
// allocation count through it would measure the emulator). In the module
// the whole path, host calls included, is checked by BenchmarkVMHeap (no
// heap growth, no GC cycle).

// newDecisionRoot configures a root for benchConfig's 64 replicas without a host.
func newDecisionRoot(tb testing.TB) *root {
	tb.Helper()
	cfg, err := config.Parse([]byte(benchConfig()))
	if err != nil {
		tb.Fatalf("config.Parse(benchConfig) = %v", err)
	}
	r := &root{id: 1, vm: &vm{}}
	if err := r.setup(cfg, nil); err != nil {
		tb.Fatalf("setup = %v", err)
	}
	return r
}

// decide runs one request through the request path minus the host calls:
// the steps of stream.route but the header, the first token, four
// streamed tokens and [DONE] as OnHttpResponseBody counts them, release.
// It returns the chosen replica.
func decide(r *root, s *stream, body []byte, now int64) int {
	s.reset(r, 7)
	s.inference, s.kind = true, openai.Chat
	parsed := r.features.parse(s.kind, body, false)
	req := r.features.of(parsed, true)
	replicas, cached := r.view.forRequest(s, req, now)
	d := &r.decision
	scoring.Pick(&r.params, req, replicas, cached, r.ledger, now, d)
	if d.Index < 0 {
		return -1
	}
	s.dispatch(d, req, now)
	s.firstToken(now)
	for _, chunk := range [][]byte{sseChunk, sseChunk, sseChunk, sseChunk, sseDone} {
		before := s.counter.Tokens()
		_, _ = s.counter.Write(chunk)
		if n := s.counter.Tokens() - before; n > 0 {
			r.ledger.Progress(s.flight, int(n))
		}
	}
	s.responseDone = true
	s.release()
	return d.Index
}

// TestDecisionAllocs: after warm-up the decision path allocates nothing.
func TestDecisionAllocs(t *testing.T) {
	r := newDecisionRoot(t)
	bodies := benchBodies(64)
	s := &stream{}
	now := int64(1e18)
	for i, b := range bodies {
		if got := decide(r, s, b, now+int64(i)); got < 0 {
			t.Fatalf("decide(body %d) = %d, want a replica", i, got)
		}
	}
	i := 0
	allocs := testing.AllocsPerRun(200, func() {
		decide(r, s, bodies[i%len(bodies)], now+int64(i))
		i++
	})
	if allocs != 0 {
		t.Errorf("decide(32 KB chat body, 64 replicas) allocs = %v, want 0", allocs)
	}
}

// BenchmarkDecision64 is the native cost of what BenchmarkRequestPath64
// runs in the module, minus host calls.
func BenchmarkDecision64(b *testing.B) {
	r := newDecisionRoot(b)
	bodies := benchBodies(4096)
	s := &stream{}
	now := int64(1e18)
	for i := range benchWarmup {
		decide(r, s, bodies[i%len(bodies)], now+int64(i))
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(bodies[0])))
	i := 0
	for b.Loop() {
		decide(r, s, bodies[i%len(bodies)], now+int64(i))
		i++
	}
}

// TestResolveModel: the last model resolved, compared first, answers as
// the lookups would, whatever the order of names.
func TestResolveModel(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"replicas":[{"name":"a","address":"10.0.0.1:8000","models":["meta-llama/Llama-3.1-8B-Instruct"]},` +
		`{"name":"b","address":"10.0.0.2:8000","models":["qwen"]},{"name":"c","address":"10.0.0.3:8000"}],` +
		`"adapters":{"sql-lora":"meta-llama/Llama-3.1-8B-Instruct"}}`))
	if err != nil {
		t.Fatal(err)
	}
	r := &root{id: 1, vm: &vm{}}
	if err := r.setup(cfg, nil); err != nil {
		t.Fatal(err)
	}
	llama, qwen, other := []bool{true, false, true}, []bool{false, true, true}, []bool{false, false, true}
	tests := []struct {
		model, base, adapter string
		served               []bool
	}{
		{"sql-lora", "meta-llama/Llama-3.1-8B-Instruct", "sql-lora", llama},
		{"sql-lora", "meta-llama/Llama-3.1-8B-Instruct", "sql-lora", llama},
		{"meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "", llama},
		{"sql-lorb", "sql-lorb", "", other}, // the same length as the adapter's name
		{"qwen", "qwen", "", qwen},
		{"sql-lora", "meta-llama/Llama-3.1-8B-Instruct", "sql-lora", llama},
		{"", "", "", other},
		{"sql-lora", "meta-llama/Llama-3.1-8B-Instruct", "sql-lora", llama},
	}
	for i, tt := range tests {
		base, adapter, served := r.features.resolveModel([]byte(tt.model))
		if base != tt.base || adapter != tt.adapter || !slices.Equal(served, tt.served) {
			t.Fatalf("request %d: resolveModel(%q) = %q, %q, %v; want %q, %q, %v", i, tt.model, base, adapter, served, tt.base, tt.adapter, tt.served)
		}
	}
}
