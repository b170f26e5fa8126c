package metrics

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzParse checks Parse's invariants on any input, for every engine: no
// panic; either ErrNoSamples or a Sample whose ratios are in [0,1] and whose
// counts are non-negative; the same result from a fresh and a reused Parser
// (no state leaks between parses). Seeds: every fixture and syntax case.
func FuzzParse(f *testing.F) {
	for _, fx := range fixtureEngines {
		f.Add(readFixture(f, fx.file))
	}
	for _, tc := range syntaxCases {
		f.Add([]byte(tc.body))
	}
	parsers := make([]*Parser, 0, numEngines)
	for e := EngineVLLM; e < numEngines; e++ {
		parsers = append(parsers, mustParser(f, e))
	}
	var reused Sample
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range parsers {
			// Dirty the reused parser and sample with another body first.
			_ = p.Parse([]byte("vllm:num_requests_waiting 3\nvllm:lora_requests_info{running_lora_adapters=\"a,b\"} 1\n"), &reused)
			errReused := p.Parse(body, &reused)

			fresh := mustParser(t, p.Engine())
			var s Sample
			err := fresh.Parse(body, &s)
			if (err == nil) != (errReused == nil) || err != nil && err.Error() != errReused.Error() {
				t.Fatalf("%v: Parse(%q) error = %v, reused parser %v", p.Engine(), body, err, errReused)
			}
			if !reflect.DeepEqual(viewOf(&s), viewOf(&reused)) {
				t.Fatalf("%v: Parse(%q) = %+v, reused parser %+v", p.Engine(), body, viewOf(&s), viewOf(&reused))
			}
			if errors.Is(err, ErrNoSamples) {
				continue
			}
			if !(s.KVUsage >= 0 && s.KVUsage <= 1) || !(s.CacheHitRate >= 0 && s.CacheHitRate <= 1) {
				t.Fatalf("%v: Parse(%q) ratios KVUsage %v CacheHitRate %v outside [0,1]", p.Engine(), body, s.KVUsage, s.CacheHitRate)
			}
			for _, c := range []int64{s.Waiting, s.Running, s.MaxRunning, s.KVUsedTokens, s.KVCapacityTokens,
				s.KVBlocks, s.KVUsedBlocks, s.BlockSizeTokens, s.MaxAdapters, s.BatchMaxTokens, s.ContextTokens} {
				if c < 0 || c > maxCount {
					t.Fatalf("%v: Parse(%q) count %d outside [0, 2^53]", p.Engine(), body, c)
				}
			}
			for _, c := range []float64{s.PrefixQueries, s.PrefixHits, s.PromptTokensTotal, s.GenerationTokensTotal, s.PreemptionsTotal} {
				if !(c >= 0) {
					t.Fatalf("%v: Parse(%q) counter %v negative or NaN", p.Engine(), body, c)
				}
			}
			if len(s.RunningAdapters) > MaxAdapterList || len(s.WaitingAdapters) > MaxAdapterList {
				t.Fatalf("%v: Parse(%q) adapter lists %d/%d exceed %d", p.Engine(), body,
					len(s.RunningAdapters), len(s.WaitingAdapters), MaxAdapterList)
			}
		}
	})
}
