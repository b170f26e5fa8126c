package metrics

import (
	"strconv"
	"strings"
	"testing"
)

// fullVLLMPage renders a /metrics page of the size a vLLM V1 server serves
// (tens of KB): the fixtures are the documentation's excerpts, a few KB,
// while a real page carries every request histogram with its buckets,
// counters with their _created series, and the HTTP server's and Python
// process metrics. The metric names are vLLM's (docs/design/metrics.md);
// the bucket bounds and figures are made up at the sizes vLLM uses (15-30
// buckets a histogram). What the parser reads: 3 waiting, 11 running, KV
// 0.42 used of 25,000 blocks of 16 tokens.
func fullVLLMPage() []byte {
	const model = `engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"`
	var b strings.Builder
	described := map[string]bool{}
	describe := func(name, kind string) { // once per family, as the format requires
		if !described[name] {
			described[name] = true
			b.WriteString("# HELP " + name + " A " + kind + " of the server.\n# TYPE " + name + " " + kind + "\n")
		}
	}
	gauge := func(name, labels, value string) {
		describe(name, "gauge")
		b.WriteString(name + "{" + labels + "} " + value + "\n")
	}
	counter := func(name, labels string, value int) {
		describe(name, "counter")
		b.WriteString(name + "_total{" + labels + "} " + strconv.Itoa(value) + ".0\n")
		b.WriteString(name + "_created{" + labels + "} 1.7327e+09\n")
	}
	histogram := func(name, labels string, bounds []string) {
		describe(name, "histogram")
		for i, le := range bounds {
			b.WriteString(name + "_bucket{" + labels + `,le="` + le + `"} ` + strconv.Itoa(i*37) + ".0\n")
		}
		b.WriteString(name + "_bucket{" + labels + `,le="+Inf"} 999.0` + "\n")
		b.WriteString(name + "_count{" + labels + "} 999.0\n")
		b.WriteString(name + "_sum{" + labels + "} 12345.678\n")
		b.WriteString(name + "_created{" + labels + "} 1.7327e+09\n")
	}
	seconds := strings.Fields("0.001 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.25 0.5 0.75 1.0 2.5 5.0 7.5 10.0 20.0 40.0 80.0 160.0 640.0 2560.0")
	tokens := strings.Fields("1.0 2.0 5.0 10.0 20.0 50.0 100.0 200.0 500.0 1000.0 2000.0 5000.0 10000.0 20000.0 50000.0 100000.0 131072.0")
	for _, g := range []string{"python_gc_objects_collected", "python_gc_objects_uncollectable", "python_gc_collections"} {
		for gen := range 3 {
			counter(g, `generation="`+strconv.Itoa(gen)+`"`, 1000+gen)
		}
	}
	gauge("python_info", `implementation="CPython",major="3",minor="12",patchlevel="9",version="3.12.9"`, "1.0")
	for _, p := range []string{"process_virtual_memory_bytes", "process_resident_memory_bytes", "process_start_time_seconds", "process_cpu_seconds_total", "process_open_fds", "process_max_fds"} {
		gauge(p, `pid="1"`, "1.23456789e+10")
	}
	gauge("vllm:num_requests_running", model, "11.0")
	gauge("vllm:num_requests_waiting", model, "3.0")
	gauge("vllm:kv_cache_usage_perc", model, "0.42")
	gauge("vllm:lora_requests_info", `max_lora="4",running_lora_adapters="",waiting_lora_adapters=""`, "1.7327e+09")
	gauge("vllm:cache_config_info", `block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="25000",num_gpu_blocks_override="None",prefix_caching_hash_algo="builtin",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"`, "1.0")
	for _, c := range []string{"vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits"} {
		counter(c, model, 123456)
	}
	for _, reason := range []string{"stop", "length", "abort"} {
		counter("vllm:request_success", model+`,finished_reason="`+reason+`"`, 500)
	}
	for _, h := range []string{"vllm:iteration_tokens_total", "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
		"vllm:request_max_num_generation_tokens", "vllm:request_params_n", "vllm:request_params_max_tokens"} {
		histogram(h, model, tokens)
	}
	for _, h := range []string{"vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds",
		"vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds",
		"vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds"} {
		histogram(h, model, seconds)
	}
	for _, handler := range []string{"/v1/chat/completions", "/v1/completions", "/metrics", "/health", "/v1/models"} {
		labels := `handler="` + handler + `",method="POST"`
		counter("http_requests", labels+`,status="2xx"`, 4321)
		histogram("http_request_duration_seconds", labels, seconds[:14])
		histogram("http_request_size_bytes", labels, tokens[:10])
		histogram("http_response_size_bytes", labels, tokens[:10])
	}
	return []byte(b.String())
}

// TestFullVLLMPage: the full-size page is valid for the reference parser
// and reads as its figures say.
func TestFullVLLMPage(t *testing.T) {
	page := fullVLLMPage()
	if _, err := expfmtParse(page); err != nil {
		t.Fatalf("expfmt(full vLLM page) = %v", err)
	}
	p := mustParser(t, EngineVLLM)
	var s Sample
	if err := p.Parse(page, &s); err != nil {
		t.Fatalf("Parse(full vLLM page) = %v", err)
	}
	if s.Waiting != 3 || s.Running != 11 || s.KVUsage != 0.42 || s.KVCapacityTokens != 25000*16 {
		t.Errorf("Parse(full vLLM page) = waiting %v, running %v, KV %v of %v tokens; want 3, 11, 0.42 of 400000",
			s.Waiting, s.Running, s.KVUsage, s.KVCapacityTokens)
	}
}

// BenchmarkParseFullVLLM parses a vLLM V1 page of a real server's size, the
// leader's work per replica and tick.
func BenchmarkParseFullVLLM(b *testing.B) {
	p := mustParser(b, EngineVLLM)
	body := fullVLLMPage()
	var s Sample
	_ = p.Parse(body, &s)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		_ = p.Parse(body, &s)
	}
}
