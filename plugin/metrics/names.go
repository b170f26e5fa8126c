package metrics

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// Source says where one Sample field comes from: the samples named Metric
// (exactly as they appear in the text, including any _total suffix), optionally
// only those whose label Label equals Value (Triton's label-keyed families).
// Alt is an older name, read only when no sample named Metric was found, so a
// rename (vLLM V0 gpu_cache_usage_perc → V1 kv_cache_usage_perc) needs no
// configuration. The zero Source reads nothing.
type Source struct {
	Metric string
	Alt    string
	Label  string
	Value  string
}

// Names maps each Sample field to the metrics it is read from. DefaultNames
// returns the per-engine defaults; configuration may override any field. When
// several series match one Source (data-parallel engines, several models),
// counts and counters are summed, ratios (KVUsage, CacheHitRate) are averaged
// and BlockSizeTokens takes the largest.
type Names struct {
	Waiting    Source // requests queued, not yet scheduled
	Running    Source // requests in the running batch
	MaxRunning Source // the server's limit on running requests

	KVUsage          Source // fraction of KV cache in use, [0,1]
	KVUsedTokens     Source // KV-cache tokens in use
	KVCapacityTokens Source // KV-cache size in tokens, when exposed directly
	KVBlocks         Source // KV-cache size in blocks
	KVUsedBlocks     Source // KV-cache blocks in use
	BlockSizeTokens  Source // tokens per KV block (page)

	// CacheConfigInfo is an info metric (vLLM) whose labels carry the KV block
	// count (LabelNumGPUBlocks) and block size (LabelBlockSize).
	CacheConfigInfo string
	// LoRAInfo is vLLM's lora_requests_info: labels carry the running and
	// waiting adapter lists and max_lora; the value is a Unix timestamp and
	// the series with the largest one is current.
	LoRAInfo string

	PrefixQueries Source // prefix-cache lookups, counter
	PrefixHits    Source // prefix-cache hits, counter
	// PrefixMisses is a misses counter; when PrefixQueries has no sample,
	// queries are derived as hits + misses (trtllm-serve counts blocks this way).
	PrefixMisses Source
	CacheHitRate Source // server-computed hit ratio gauge, [0,1]

	PromptTokens     Source // prompt tokens processed, counter
	GenerationTokens Source // generated tokens, counter
	Preemptions      Source // preemptions, counter

	BatchMaxTokens Source // TGI: token budget of the current batch
	ContextTokens  Source // prefill (context) tokens in the current iteration
}

// Label names read from vLLM's info metrics (vllm/v1/metrics/loggers.py as
// documented in docs/design/metrics.md; seen in the llm-d-inference-sim fixture).
const (
	LabelNumGPUBlocks    = "num_gpu_blocks"
	LabelBlockSize       = "block_size"
	LabelRunningAdapters = "running_lora_adapters"
	LabelWaitingAdapters = "waiting_lora_adapters"
	LabelMaxLoRA         = "max_lora"
)

// vLLM metric names. Sources: vllm-project/vllm docs/design/metrics.md
// (commit f7e3a087, testdata/metrics/vllm_v1__vllm_docs_design_metrics.prom);
// V0 KV name: vllm-project/aibrix pkg/metrics/utils_test.go (commit e3e10f9e,
// vllm_v0__aibrix_utils_test.prom); lora_requests_info: llm-d/llm-d-inference-sim
// tests (commit eec055a3); prefix-cache and preemption counters: the vLLM column
// of vllm-project/aibrix docs "Multi-Engine Support" table, with the pre-rename
// gpu_prefix_cache_* names still seen in deployed scrapes.
const (
	VLLMNumRequestsWaiting    = "vllm:num_requests_waiting"
	VLLMNumRequestsRunning    = "vllm:num_requests_running"
	VLLMKVCacheUsagePerc      = "vllm:kv_cache_usage_perc"
	VLLMGPUCacheUsagePerc     = "vllm:gpu_cache_usage_perc" // V0 name
	VLLMCacheConfigInfo       = "vllm:cache_config_info"
	VLLMLoRARequestsInfo      = "vllm:lora_requests_info"
	VLLMPrefixCacheQueries    = "vllm:prefix_cache_queries_total"
	VLLMPrefixCacheHits       = "vllm:prefix_cache_hits_total"
	VLLMGPUPrefixCacheQueries = "vllm:gpu_prefix_cache_queries_total" // pre-rename
	VLLMGPUPrefixCacheHits    = "vllm:gpu_prefix_cache_hits_total"    // pre-rename
	VLLMPromptTokensTotal     = "vllm:prompt_tokens_total"
	VLLMGenerationTokensTotal = "vllm:generation_tokens_total"
	VLLMNumPreemptionsTotal   = "vllm:num_preemptions_total"
)

// SGLang metric names. Source: sgl-project/sglang docs/references/production_metrics.md
// (commit 40ef116f, sglang__sglang_docs_production_metrics.prom); max_total_num_tokens
// and page_size are newer gauges set once at start-up
// (python/sglang/srt/metrics/collector.py, "emit_constants"), absent in that doc.
const (
	SGLangNumQueueReqs      = "sglang:num_queue_reqs"
	SGLangNumRunningReqs    = "sglang:num_running_reqs"
	SGLangTokenUsage        = "sglang:token_usage"
	SGLangNumUsedTokens     = "sglang:num_used_tokens"
	SGLangMaxTotalNumTokens = "sglang:max_total_num_tokens"
	SGLangPageSize          = "sglang:page_size"
	SGLangCacheHitRate      = "sglang:cache_hit_rate"
	SGLangPromptTokensTotal = "sglang:prompt_tokens_total"
	SGLangGenerationTokens  = "sglang:generation_tokens_total"
)

// TGI metric names. Source: huggingface/text-generation-inference
// docs/source/reference/metrics.md (commit 53fdbe61). TGI exposes no KV-cache
// or LoRA metric.
const (
	TGIQueueSize             = "tgi_queue_size"
	TGIBatchCurrentSize      = "tgi_batch_current_size"
	TGIBatchCurrentMaxTokens = "tgi_batch_current_max_tokens"
)

// Triton + TensorRT-LLM backend names: one family per topic, the figure chosen
// by a label. Source: triton-inference-server/tensorrtllm_backend README.md
// "Triton Metrics" (commit 0b9d7d5a, triton_trtllm__tensorrtllm_backend_README.prom).
const (
	TritonRequestMetrics         = "nv_trt_llm_request_metrics"
	TritonRequestTypeLabel       = "request_type"
	TritonKVCacheBlockMetrics    = "nv_trt_llm_kv_cache_block_metrics"
	TritonKVCacheBlockTypeLabel  = "kv_cache_block_type"
	TritonInflightBatcherMetrics = "nv_trt_llm_inflight_batcher_metrics"
	TritonInflightBatcherLabel   = "inflight_batcher_specific_metric"
)

// trtllm-serve names (served at /prometheus/metrics). Sources: NVIDIA/TensorRT-LLM
// tensorrt_llm/metrics/collector.py, MetricsCollector docstring and gauges
// (recent main; iteration metrics need enable_iter_perf_stats), and
// examples/serve/prometheus_metrics.py (commit 47d640ec). Releases up to 1.1
// exported only request/latency series; Dynamo re-exports them with a
// "trtllm:" prefix instead (override the names for that).
const (
	TRTLLMNumRequestsWaiting    = "trtllm_num_requests_waiting"
	TRTLLMNumRequestsRunning    = "trtllm_num_requests_running"
	TRTLLMMaxNumActiveRequests  = "trtllm_max_num_active_requests"
	TRTLLMKVCacheUtilization    = "trtllm_kv_cache_utilization"
	TRTLLMKVCacheMaxBlocks      = "trtllm_kv_cache_max_blocks"
	TRTLLMKVCacheUsedBlocks     = "trtllm_kv_cache_used_blocks"
	TRTLLMKVCacheTokensPerBlock = "trtllm_kv_cache_tokens_per_block"
	TRTLLMKVCacheHitRate        = "trtllm_kv_cache_hit_rate"
	TRTLLMKVCacheReusedBlocks   = "trtllm_kv_cache_reused_blocks_total"
	TRTLLMKVCacheMissedBlocks   = "trtllm_kv_cache_missed_blocks_total"
	TRTLLMPromptTokensTotal     = "trtllm_prompt_tokens_total"
	TRTLLMGenerationTokensTotal = "trtllm_generation_tokens_total"
	TRTLLMTotalContextTokens    = "trtllm_total_context_tokens"
)

// DefaultNames returns the metric names engine e exports, or the zero Names for
// EngineUnknown.
func DefaultNames(e Engine) Names {
	m := func(name string) Source { return Source{Metric: name} }
	switch e {
	case EngineVLLM:
		return Names{
			Waiting:          m(VLLMNumRequestsWaiting),
			Running:          m(VLLMNumRequestsRunning),
			KVUsage:          Source{Metric: VLLMKVCacheUsagePerc, Alt: VLLMGPUCacheUsagePerc},
			CacheConfigInfo:  VLLMCacheConfigInfo,
			LoRAInfo:         VLLMLoRARequestsInfo,
			PrefixQueries:    Source{Metric: VLLMPrefixCacheQueries, Alt: VLLMGPUPrefixCacheQueries},
			PrefixHits:       Source{Metric: VLLMPrefixCacheHits, Alt: VLLMGPUPrefixCacheHits},
			PromptTokens:     m(VLLMPromptTokensTotal),
			GenerationTokens: m(VLLMGenerationTokensTotal),
			Preemptions:      m(VLLMNumPreemptionsTotal),
		}
	case EngineSGLang:
		return Names{
			Waiting:          m(SGLangNumQueueReqs),
			Running:          m(SGLangNumRunningReqs),
			KVUsage:          m(SGLangTokenUsage),
			KVUsedTokens:     m(SGLangNumUsedTokens),
			KVCapacityTokens: m(SGLangMaxTotalNumTokens),
			BlockSizeTokens:  m(SGLangPageSize),
			CacheHitRate:     m(SGLangCacheHitRate),
			PromptTokens:     m(SGLangPromptTokensTotal),
			GenerationTokens: m(SGLangGenerationTokens),
		}
	case EngineTGI:
		return Names{
			Waiting:        m(TGIQueueSize),
			Running:        m(TGIBatchCurrentSize),
			BatchMaxTokens: m(TGIBatchCurrentMaxTokens),
		}
	case EngineTriton:
		req := func(v string) Source {
			return Source{Metric: TritonRequestMetrics, Label: TritonRequestTypeLabel, Value: v}
		}
		kv := func(v string) Source {
			return Source{Metric: TritonKVCacheBlockMetrics, Label: TritonKVCacheBlockTypeLabel, Value: v}
		}
		return Names{
			Waiting:         req("waiting"),
			Running:         req("active"),
			MaxRunning:      req("max"),
			KVUsage:         kv("fraction"),
			KVBlocks:        kv("max"),
			KVUsedBlocks:    kv("used"),
			BlockSizeTokens: kv("tokens_per"),
			ContextTokens: Source{Metric: TritonInflightBatcherMetrics,
				Label: TritonInflightBatcherLabel, Value: "total_context_tokens"},
		}
	case EngineTRTLLM:
		return Names{
			Waiting:          m(TRTLLMNumRequestsWaiting),
			Running:          m(TRTLLMNumRequestsRunning),
			MaxRunning:       m(TRTLLMMaxNumActiveRequests),
			KVUsage:          m(TRTLLMKVCacheUtilization),
			KVBlocks:         m(TRTLLMKVCacheMaxBlocks),
			KVUsedBlocks:     m(TRTLLMKVCacheUsedBlocks),
			BlockSizeTokens:  m(TRTLLMKVCacheTokensPerBlock),
			PrefixHits:       m(TRTLLMKVCacheReusedBlocks),
			PrefixMisses:     m(TRTLLMKVCacheMissedBlocks),
			CacheHitRate:     m(TRTLLMKVCacheHitRate),
			PromptTokens:     m(TRTLLMPromptTokensTotal),
			GenerationTokens: m(TRTLLMGenerationTokensTotal),
			ContextTokens:    m(TRTLLMTotalContextTokens),
		}
	}
	return Names{}
}

// sources lists n's Sources in field order, for compilation and validation.
func (n *Names) sources() [numFields]*Source {
	return [numFields]*Source{
		fWaiting: &n.Waiting, fRunning: &n.Running, fMaxRunning: &n.MaxRunning,
		fKVUsage: &n.KVUsage, fKVUsedTokens: &n.KVUsedTokens,
		fKVCapacityTokens: &n.KVCapacityTokens, fKVBlocks: &n.KVBlocks,
		fKVUsedBlocks: &n.KVUsedBlocks, fBlockSize: &n.BlockSizeTokens,
		fPrefixQueries: &n.PrefixQueries, fPrefixHits: &n.PrefixHits,
		fPrefixMisses: &n.PrefixMisses, fCacheHitRate: &n.CacheHitRate,
		fPromptTokens: &n.PromptTokens, fGenerationTokens: &n.GenerationTokens,
		fPreemptions: &n.Preemptions, fBatchMaxTokens: &n.BatchMaxTokens,
		fContextTokens: &n.ContextTokens,
	}
}

// Keys of the Names fields as configuration spells them (plugin/config's
// "metric_names" object) and as validation errors name them: the field names
// in snake case.
const (
	KeyWaiting          = "waiting"
	KeyRunning          = "running"
	KeyMaxRunning       = "max_running"
	KeyKVUsage          = "kv_usage"
	KeyKVUsedTokens     = "kv_used_tokens"
	KeyKVCapacityTokens = "kv_capacity_tokens"
	KeyKVBlocks         = "kv_blocks"
	KeyKVUsedBlocks     = "kv_used_blocks"
	KeyBlockSizeTokens  = "block_size_tokens"
	KeyPrefixQueries    = "prefix_queries"
	KeyPrefixHits       = "prefix_hits"
	KeyPrefixMisses     = "prefix_misses"
	KeyCacheHitRate     = "cache_hit_rate"
	KeyPromptTokens     = "prompt_tokens"
	KeyGenerationTokens = "generation_tokens"
	KeyPreemptions      = "preemptions"
	KeyBatchMaxTokens   = "batch_max_tokens"
	KeyContextTokens    = "context_tokens"

	// KeyCacheConfigInfo and KeyLoRAInfo name the two info metrics
	// (Names.CacheConfigInfo, Names.LoRAInfo), which are bare names.
	KeyCacheConfigInfo = "cache_config_info"
	KeyLoRAInfo        = "lora_info"
)

// fieldKeys are the keys of the Source fields, in field order.
var fieldKeys = [numFields]string{
	fWaiting: KeyWaiting, fRunning: KeyRunning, fMaxRunning: KeyMaxRunning,
	fKVUsage: KeyKVUsage, fKVUsedTokens: KeyKVUsedTokens,
	fKVCapacityTokens: KeyKVCapacityTokens, fKVBlocks: KeyKVBlocks,
	fKVUsedBlocks: KeyKVUsedBlocks, fBlockSize: KeyBlockSizeTokens,
	fPrefixQueries: KeyPrefixQueries, fPrefixHits: KeyPrefixHits,
	fPrefixMisses: KeyPrefixMisses, fCacheHitRate: KeyCacheHitRate,
	fPromptTokens: KeyPromptTokens, fGenerationTokens: KeyGenerationTokens,
	fPreemptions: KeyPreemptions, fBatchMaxTokens: KeyBatchMaxTokens,
	fContextTokens: KeyContextTokens,
}

// SourceField returns the Source field of n that key (KeyWaiting …
// KeyContextTokens) names, or nil when key names none: configuration sets
// an override through it, so the key table lives only here.
func (n *Names) SourceField(key string) *Source {
	for f, k := range fieldKeys {
		if k == key {
			return n.sources()[f]
		}
	}
	return nil
}

// InfoField returns the info-metric name of n that key (KeyCacheConfigInfo
// or KeyLoRAInfo) names, or nil when key names neither.
func (n *Names) InfoField(key string) *string {
	switch key {
	case KeyCacheConfigInfo:
		return &n.CacheConfigInfo
	case KeyLoRAInfo:
		return &n.LoRAInfo
	}
	return nil
}

// Validate reports the first name in n that no sample line could carry: metric
// names must be non-empty valid UTF-8 (quoted names allow any), label names
// likewise, and a Value needs a Label.
func (n *Names) Validate() error {
	for f, src := range n.sources() {
		if src.Metric == "" {
			if src.Alt != "" || src.Label != "" {
				return errors.New("metrics: names." + fieldKeys[f] + " has alt or label but no metric")
			}
			continue
		}
		for _, s := range [...]string{src.Metric, src.Alt, src.Label} {
			if s != "" && !utf8.ValidString(s) {
				return errors.New("metrics: names." + fieldKeys[f] + " " + strconv.Quote(s) + " is not valid UTF-8")
			}
		}
		if src.Label == "" && src.Value != "" {
			return errors.New("metrics: names." + fieldKeys[f] + " value " + strconv.Quote(src.Value) + " needs a label")
		}
	}
	for _, s := range [...]string{n.CacheConfigInfo, n.LoRAInfo} {
		if !utf8.ValidString(s) {
			return errors.New("metrics: info metric name " + strconv.Quote(s) + " is not valid UTF-8")
		}
	}
	return nil
}
