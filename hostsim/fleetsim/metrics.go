package fleetsim

import (
	"strconv"
	"strings"
)

// Metric names the replicas expose, as the engines spell them (vLLM V1
// docs/design/metrics.md; SGLang docs/references/production_metrics.md; TGI
// docs/source/reference/metrics.md — see testdata/metrics/).
const (
	vllmRunning       = "vllm:num_requests_running"
	vllmWaiting       = "vllm:num_requests_waiting"
	vllmKVUsage       = "vllm:kv_cache_usage_perc"
	vllmCacheConfig   = "vllm:cache_config_info"
	vllmLoRAInfo      = "vllm:lora_requests_info"
	vllmPrefixQueries = "vllm:prefix_cache_queries_total"
	vllmPrefixHits    = "vllm:prefix_cache_hits_total"
	vllmPromptTokens  = "vllm:prompt_tokens_total"
	vllmGenTokens     = "vllm:generation_tokens_total"
	vllmPreemptions   = "vllm:num_preemptions_total"
	sglRunning        = "sglang:num_running_reqs"
	sglQueue          = "sglang:num_queue_reqs"
	sglTokenUsage     = "sglang:token_usage"
	sglUsedTokens     = "sglang:num_used_tokens"
	sglMaxTotalTokens = "sglang:max_total_num_tokens"
	sglCacheHitRate   = "sglang:cache_hit_rate"
	sglPromptTokens   = "sglang:prompt_tokens_total"
	sglGenTokens      = "sglang:generation_tokens_total"
	tgiQueueSize      = "tgi_queue_size"
	tgiBatchSize      = "tgi_batch_current_size"
	tgiBatchMaxTokens = "tgi_batch_current_max_tokens"
	tgiRequestCount   = "tgi_request_count"
	tgiRequestSuccess = "tgi_request_success"
)

type promWriter struct {
	b      []byte
	labels string
}

func (w *promWriter) family(name, typ, help string) {
	w.b = append(w.b, "# HELP "...)
	w.b = append(w.b, name...)
	w.b = append(w.b, ' ')
	w.b = append(w.b, help...)
	w.b = append(w.b, "\n# TYPE "...)
	w.b = append(w.b, name...)
	w.b = append(w.b, ' ')
	w.b = append(w.b, typ...)
	w.b = append(w.b, '\n')
}

func (w *promWriter) sample(name, extra string, v float64) {
	w.b = append(w.b, name...)
	if w.labels != "" || extra != "" {
		w.b = append(w.b, '{')
		w.b = append(w.b, extra...)
		if w.labels != "" && extra != "" {
			w.b = append(w.b, ',')
		}
		w.b = append(w.b, w.labels...)
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, ' ')
	w.b = strconv.AppendFloat(w.b, v, 'g', -1, 64)
	w.b = append(w.b, '\n')
}

func (w *promWriter) gauge(name, help string, v float64) {
	w.family(name, "gauge", help)
	w.sample(name, "", v)
}

func (w *promWriter) counter(name, help string, v float64) {
	w.family(name, "counter", help)
	w.sample(name, "", v)
}

// MetricsText renders the replica's current state as its engine's /metrics
// page ("" or "vllm": vLLM V1; "sglang"; "tgi"), appended to dst. vLLM's
// lora_requests_info carries the adapters with running and waiting requests
// and, as its value, the time of the report in seconds (the newest series
// wins, as in vLLM).
func (r *Replica) MetricsText(dst []byte, engine string) []byte {
	if engine == "" {
		engine = r.cfg.Engine
	}
	w := promWriter{b: dst}
	running, waiting := float64(len(r.running)), float64(len(r.waiting))
	switch engine {
	case EngineSGLang:
		w.labels = `model_name="` + r.cfg.Model + `"`
		w.gauge(sglRunning, "The number of running requests", running)
		w.gauge(sglQueue, "The number of requests in the waiting queue", waiting)
		w.gauge(sglTokenUsage, "The token usage", r.KVUsage())
		w.gauge(sglUsedTokens, "The number of used tokens", float64(r.kv.inUse()*BlockTokens))
		w.gauge(sglMaxTotalTokens, "Maximum total number of tokens in the KV cache pool", float64(r.KVCapacityTokens()))
		hit := 0.0
		if r.prefixQueries > 0 {
			hit = float64(r.prefixHits) / float64(r.prefixQueries)
		}
		w.gauge(sglCacheHitRate, "The cache hit rate", hit)
		w.counter(sglPromptTokens, "Number of prefill tokens processed.", float64(r.promptTokens))
		w.counter(sglGenTokens, "Number of generation tokens processed.", float64(r.genTokens))
	case EngineTGI:
		w.gauge(tgiQueueSize, "Current queue size", waiting)
		w.gauge(tgiBatchSize, "Current batch size", running)
		tok := 0
		for _, s := range r.running {
			tok += s.target + s.gen
		}
		w.gauge(tgiBatchMaxTokens, "Maximum tokens for the current batch", float64(tok))
		w.counter(tgiRequestCount, "Total number of requests", float64(r.completed+int64(len(r.running)+len(r.waiting))))
		w.counter(tgiRequestSuccess, "Number of successful requests", float64(r.completed))
	default:
		w.labels = `engine="0",model_name="` + r.cfg.Model + `"`
		w.gauge(vllmRunning, "Number of requests in model execution batches.", running)
		w.gauge(vllmWaiting, "Number of requests waiting to be processed.", waiting)
		w.gauge(vllmKVUsage, "KV-cache usage. 1 means 100 percent usage.", r.KVUsage())
		w.counter(vllmPrefixQueries, "Prefix cache queries, in terms of number of queried tokens.", float64(r.prefixQueries))
		w.counter(vllmPrefixHits, "Prefix cache hits, in terms of number of cached tokens.", float64(r.prefixHits))
		w.counter(vllmPromptTokens, "Number of prefill tokens processed.", float64(r.promptTokens))
		w.counter(vllmGenTokens, "Number of generation tokens processed.", float64(r.genTokens))
		w.counter(vllmPreemptions, "Cumulative number of preemption from the engine.", float64(r.preemptions))
		w.labels = ""
		w.family(vllmCacheConfig, "gauge", "Information of the LLMEngine CacheConfig")
		w.sample(vllmCacheConfig, `block_size="`+strconv.Itoa(BlockTokens)+`",enable_prefix_caching="True",gpu_memory_utilization="0.9",num_gpu_blocks="`+strconv.Itoa(r.kv.total)+`"`, 1)
		if r.cfg.MaxLoras > 0 {
			var run, wait []string
			for _, sl := range r.slots {
				if sl.active > 0 {
					run = append(run, sl.name)
				}
			}
			for _, s := range r.waiting {
				if s.req.Adapter != "" && !s.adapter {
					wait = appendUnique(wait, s.req.Adapter)
				}
			}
			w.family(vllmLoRAInfo, "gauge", "Running stats on lora requests.")
			w.sample(vllmLoRAInfo, `max_lora="`+strconv.Itoa(r.cfg.MaxLoras)+`",running_lora_adapters="`+
				strings.Join(run, ",")+`",waiting_lora_adapters="`+strings.Join(wait, ",")+`"`, simEpochUnixSec+r.sim.now.Seconds())
		}
	}
	return w.b
}

// simEpochUnixSec is the Unix time virtual time 0 stands for in metrics that
// carry wall-clock timestamps (vLLM's lora_requests_info value).
const simEpochUnixSec = 1_750_000_000
