package metrics

import (
	"testing"
)

// TestParseAllocs holds the scrape path to zero allocations in steady state
// (a reused Parser and Sample): in the wasm VM every allocation brings the GC
// closer, and the GC must rarely run (docs/performance.md "Go on wasm").
func TestParseAllocs(t *testing.T) {
	tests := []struct {
		name   string
		file   string
		engine Engine
	}{
		{"vllm docs", fxVLLMDocs, EngineVLLM},
		{"vllm simulator with adapters", fxVLLMSim, EngineVLLM},
		{"sglang", fxSGLang, EngineSGLang},
		{"triton", fxTriton, EngineTriton},
		{"trtllm-serve", fxTRTLLM, EngineTRTLLM},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParser(t, tc.engine)
			body := readFixture(t, tc.file)
			var s Sample
			_ = p.Parse(body, &s) // warm-up: adapter slices reach their size
			if got := testing.AllocsPerRun(100, func() { _ = p.Parse(body, &s) }); got != 0 {
				t.Errorf("Parse(%s) allocs = %v, want 0", tc.file, got)
			}
		})
	}
}

func BenchmarkParse(b *testing.B) {
	for _, fx := range fixtureEngines {
		b.Run(fx.file, func(b *testing.B) {
			p := mustParser(b, fx.engine)
			body := readFixture(b, fx.file)
			var s Sample
			_ = p.Parse(body, &s)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = p.Parse(body, &s)
			}
		})
	}
}
