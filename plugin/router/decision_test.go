package router

import (
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
	if err := r.setup(cfg); err != nil {
		tb.Fatalf("setup = %v", err)
	}
	return r
}

// decide runs one request through the decision and its accounting as
// route, OnHttpResponseBody and release do, minus the host calls: parse
// and hash the body, look the chain up, pick, dispatch, record the prefix,
// count streamed tokens, release. It returns the chosen replica.
func decide(r *root, s *stream, body []byte, now int64) int {
	s.reset(r, 7)
	s.inference, s.kind = true, openai.Chat
	req := r.features(s, body, false)
	for i := range r.cached {
		r.cached[i] = 0
	}
	if len(req.Chain) > 0 {
		r.index.Lookup(req.Chain, r.cached)
	}
	d := &r.decision
	scoring.Pick(&r.params, req, r.replicas, r.cached, r.ledger, now, d)
	if d.Index < 0 {
		return -1
	}
	best := d.Top[0]
	s.replica = d.Index
	s.uncached = max(req.PromptTokens-best.CachedTokens, 1)
	s.flight = r.ledger.Dispatch(d.Index, req, s.uncached, now, best.StartNanos)
	if len(req.Chain) > 0 {
		r.index.Record(d.Index, req.Chain)
		r.outbox.Push(d.Index, req.Chain)
	}
	s.liveAt = len(r.vm.live)
	r.vm.live = append(r.vm.live, s)
	r.ledger.FirstToken(s.flight)
	for range 4 {
		before := s.counter.Tokens()
		_, _ = s.counter.Write(sseChunk)
		if n := s.counter.Tokens() - before; n > 0 {
			r.ledger.Progress(s.flight, int(n))
		}
	}
	_, _ = s.counter.Write(sseDone)
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
	cfg, err := config.Parse([]byte(`{"replicas":[{"name":"a","address":"10.0.0.1:8000"}],` +
		`"adapters":{"sql-lora":"meta-llama/Llama-3.1-8B-Instruct"}}`))
	if err != nil {
		t.Fatal(err)
	}
	r := &root{id: 1, vm: &vm{}}
	if err := r.setup(cfg); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ model, base, adapter string }{
		{"sql-lora", "meta-llama/Llama-3.1-8B-Instruct", "sql-lora"},
		{"sql-lora", "meta-llama/Llama-3.1-8B-Instruct", "sql-lora"},
		{"meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", ""},
		{"sql-lorb", "sql-lorb", ""}, // the same length as the adapter's name
		{"sql-lora", "meta-llama/Llama-3.1-8B-Instruct", "sql-lora"},
		{"", "", ""},
		{"sql-lora", "meta-llama/Llama-3.1-8B-Instruct", "sql-lora"},
	}
	for i, tt := range tests {
		if base, adapter := r.resolveModel([]byte(tt.model)); base != tt.base || adapter != tt.adapter {
			t.Fatalf("request %d: resolveModel(%q) = %q, %q; want %q, %q", i, tt.model, base, adapter, tt.base, tt.adapter)
		}
	}
}
