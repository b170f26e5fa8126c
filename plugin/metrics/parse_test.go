package metrics

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fixtureDir holds the shared scrapes (testdata/metrics at the module root);
// each file's first line names its source.
const fixtureDir = "../../testdata/metrics"

// Fixture files, by engine.
const (
	fxVLLMDocs = "vllm_v1__vllm_docs_design_metrics.prom"
	fxVLLMSim  = "vllm_v1__llm-d-inference-sim_tests.prom"
	fxVLLMV0   = "vllm_v0__aibrix_utils_test.prom"
	fxSGLang   = "sglang__sglang_docs_production_metrics.prom"
	fxTriton   = "triton_trtllm__tensorrtllm_backend_README.prom"
	fxTGI      = "tgi__tgi_docs_reference_metrics.prom"
	fxTRTLLM   = "trtllm_serve__tensorrt_llm_metrics_collector.prom"
)

// fixtureEngines maps every fixture to the engine that serves it.
var fixtureEngines = []struct {
	file   string
	engine Engine
}{
	{fxVLLMDocs, EngineVLLM},
	{fxVLLMSim, EngineVLLM},
	{fxVLLMV0, EngineVLLM},
	{fxSGLang, EngineSGLang},
	{fxTriton, EngineTriton},
	{fxTGI, EngineTGI},
	{fxTRTLLM, EngineTRTLLM},
}

func readFixture(tb testing.TB, file string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, file))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func mustParser(tb testing.TB, e Engine) *Parser {
	tb.Helper()
	p, err := NewParser(e, DefaultNames(e))
	if err != nil {
		tb.Fatalf("NewParser(%v) = %v", e, err)
	}
	return p
}

// view is the comparable part of a Sample, with adapters as plain names.
type view struct {
	Present                                  Field
	Problems                                 Problem
	BadLines, FirstBadLine                   int32
	Waiting, Running, MaxRunning             int64
	KVUsage                                  float64
	KVUsedTokens, KVCapacityTokens, KVBlocks int64
	KVUsedBlocks, BlockSizeTokens            int64
	RunningAdapters, WaitingAdapters         []string
	MaxAdapters                              int64
	PrefixQueries, PrefixHits, CacheHitRate  float64
	PromptTokensTotal, GenerationTokensTotal float64
	PreemptionsTotal                         float64
	BatchMaxTokens, ContextTokens            int64
}

func names(as []Adapter) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

func viewOf(s *Sample) view {
	return view{
		Present: s.Present, Problems: s.Problems, BadLines: s.BadLines, FirstBadLine: s.FirstBadLine,
		Waiting: s.Waiting, Running: s.Running, MaxRunning: s.MaxRunning,
		KVUsage: s.KVUsage, KVUsedTokens: s.KVUsedTokens, KVCapacityTokens: s.KVCapacityTokens,
		KVBlocks: s.KVBlocks, KVUsedBlocks: s.KVUsedBlocks, BlockSizeTokens: s.BlockSizeTokens,
		RunningAdapters: names(s.RunningAdapters), WaitingAdapters: names(s.WaitingAdapters),
		MaxAdapters: s.MaxAdapters, PrefixQueries: s.PrefixQueries, PrefixHits: s.PrefixHits,
		CacheHitRate: s.CacheHitRate, PromptTokensTotal: s.PromptTokensTotal,
		GenerationTokensTotal: s.GenerationTokensTotal, PreemptionsTotal: s.PreemptionsTotal,
		BatchMaxTokens: s.BatchMaxTokens, ContextTokens: s.ContextTokens,
	}
}

type fixtureCase struct {
	name    string
	file    string
	want    view
	wantErr error // sentinel, or nil
}

func runFixtureCases(t *testing.T, e Engine, cases []fixtureCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParser(t, e)
			var s Sample
			err := p.Parse(readFixture(t, tc.file), &s)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("Parse(%s) error = %v, want %v", tc.file, err, tc.wantErr)
			}
			if got := viewOf(&s); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse(%s) =\n%+v\nwant\n%+v", tc.file, got, tc.want)
			}
		})
	}
}

func TestParseVLLM(t *testing.T) {
	runFixtureCases(t, EngineVLLM, []fixtureCase{
		{
			// The doc's cache_config_info shows block_size but no num_gpu_blocks,
			// so capacity stays unknown; no waiting gauge in the excerpt.
			name: "v1 docs", file: fxVLLMDocs,
			want: view{
				Present:               FieldRunning | FieldBlockSizeTokens | FieldGenerationTokens,
				Running:               8,
				BlockSizeTokens:       16,
				GenerationTokensTotal: 27453,
			},
		},
		{
			// Line 5 is a lora_requests_info series without a value (invalid,
			// skipped); the newest series (2.000000001e+09) wins; duplicated
			// counter series add up.
			name: "v1 simulator", file: fxVLLMSim, wantErr: ErrBadLine,
			want: view{
				Present: FieldKVCapacityTokens | FieldKVBlocks | FieldBlockSizeTokens |
					FieldAdapters | FieldMaxAdapters | FieldPromptTokens | FieldGenerationTokens,
				Problems: ProblemBadLine, BadLines: 1, FirstBadLine: 5,
				KVCapacityTokens: 128, KVBlocks: 16, BlockSizeTokens: 8,
				RunningAdapters: []string{"lora4"}, WaitingAdapters: []string{"lora5", "lora6"},
				MaxAdapters:       1,
				PromptTokensTotal: 12345 + 200, GenerationTokensTotal: 200 + 67890,
			},
		},
		{
			// V0's gpu_cache_usage_perc is read through the Alt name.
			name: "v0 aibrix", file: fxVLLMV0,
			want: view{Present: FieldWaiting | FieldKVUsage},
		},
	})
}

func TestParseSGLang(t *testing.T) {
	runFixtureCases(t, EngineSGLang, []fixtureCase{{
		// This older scrape has no max_total_num_tokens, so capacity is unknown.
		name: "docs production", file: fxSGLang,
		want: view{
			Present: FieldWaiting | FieldRunning | FieldKVUsage | FieldKVUsedTokens |
				FieldCacheHitRate | FieldPromptTokens | FieldGenerationTokens,
			Waiting: 2826, Running: 162, KVUsage: 0.28, KVUsedTokens: 123859,
			CacheHitRate:      0.007507552643049313,
			PromptTokensTotal: 8.128902e+06, GenerationTokensTotal: 7.557572e+06,
		},
	}})
}

func TestParseTriton(t *testing.T) {
	runFixtureCases(t, EngineTriton, []fixtureCase{{
		// The README's numbers are illustrative (fraction 0.4875 with 1 of
		// 6239 blocks used); the parser reports each as exposed.
		name: "tensorrtllm_backend README", file: fxTriton,
		want: view{
			Present: FieldWaiting | FieldRunning | FieldMaxRunning | FieldKVUsage |
				FieldKVCapacityTokens | FieldKVBlocks | FieldKVUsedBlocks | FieldBlockSizeTokens |
				FieldContextTokens,
			Waiting: 1, Running: 0, MaxRunning: 512, KVUsage: 0.4875,
			KVCapacityTokens: 6239 * 64, KVBlocks: 6239, KVUsedBlocks: 1, BlockSizeTokens: 64,
		},
	}})
}

func TestParseTGI(t *testing.T) {
	runFixtureCases(t, EngineTGI, []fixtureCase{{
		name: "docs reference", file: fxTGI,
		want: view{
			Present: FieldWaiting | FieldRunning | FieldBatchMaxTokens,
			Waiting: 7, Running: 12, BatchMaxTokens: 18432,
		},
	}})
}

func TestParseTRTLLM(t *testing.T) {
	runFixtureCases(t, EngineTRTLLM, []fixtureCase{{
		// Prefix queries are derived as reused + missed blocks; _created
		// companions are ignored.
		name: "collector names", file: fxTRTLLM,
		want: view{
			Present: FieldWaiting | FieldRunning | FieldMaxRunning | FieldKVUsage |
				FieldKVCapacityTokens | FieldKVBlocks | FieldKVUsedBlocks | FieldBlockSizeTokens |
				FieldPrefixQueries | FieldPrefixHits | FieldCacheHitRate |
				FieldPromptTokens | FieldGenerationTokens | FieldContextTokens,
			Waiting: 3, Running: 14, MaxRunning: 2048, KVUsage: 0.6,
			KVCapacityTokens: 7680 * 32, KVBlocks: 7680, KVUsedBlocks: 4608, BlockSizeTokens: 32,
			PrefixQueries: 123456 + 170479, PrefixHits: 123456, CacheHitRate: 0.42,
			PromptTokensTotal: 2.514e+06, GenerationTokensTotal: 913277, ContextTokens: 4096,
		},
	}})
}

// TestFixtureSources holds every fixture to the shared-data rule: its first
// line says where it comes from.
func TestFixtureSources(t *testing.T) {
	for _, fx := range fixtureEngines {
		b := readFixture(t, fx.file)
		if !strings.HasPrefix(string(b), "# source: ") {
			t.Errorf("%s: first line does not start with %q", fx.file, "# source: ")
		}
	}
}
