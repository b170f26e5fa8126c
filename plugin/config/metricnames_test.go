package config

import (
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/plugin/metrics"
)

// TestParseMetricNames: overrides at both levels, in every value form and in
// any key order, land on top of the right engine's defaults.
func TestParseMetricNames(t *testing.T) {
	vllm := metrics.DefaultNames(metrics.EngineVLLM)
	trt := metrics.DefaultNames(metrics.EngineTRTLLM)
	triton := metrics.DefaultNames(metrics.EngineTriton)
	with := func(n metrics.Names, fn func(*metrics.Names)) metrics.Names { fn(&n); return n }
	dynamo := func(n *metrics.Names) {
		n.Waiting = metrics.Source{Metric: "trtllm:num_requests_waiting"}
		n.Running = metrics.Source{Metric: "trtllm:num_requests_running"}
	}
	const a, b = `"name":"a","address":"10.0.0.1:1"`, `"name":"b","address":"10.0.0.2:1"`
	tests := []struct {
		name string
		in   string
		want []metrics.Names // per replica
	}{
		{name: "none", in: `{"replicas":[{` + a + `}]}`, want: []metrics.Names{vllm}},
		{name: "replica string",
			in:   `{"replicas":[{` + a + `,"engine":"trtllm-serve","metric_names":{"waiting":"trtllm:num_requests_waiting","running":"trtllm:num_requests_running"}},{` + b + `,"engine":"trtllm-serve"}]}`,
			want: []metrics.Names{with(trt, dynamo), trt}},
		{name: "engine after metric_names",
			in:   `{"replicas":[{` + a + `,"metric_names":{"waiting":"trtllm:num_requests_waiting","running":"trtllm:num_requests_running"},"engine":"trtllm-serve"}]}`,
			want: []metrics.Names{with(trt, dynamo)}},
		{name: "string drops alt", in: `{"replicas":[{` + a + `,"metric_names":{"kv_usage":"fork:kv"}}]}`,
			want: []metrics.Names{with(vllm, func(n *metrics.Names) { n.KVUsage = metrics.Source{Metric: "fork:kv"} })}},
		{name: "null reads nothing", in: `{"replicas":[{` + a + `,"metric_names":{"preemptions":null,"lora_info":null,"prefix_hits":null}}]}`,
			want: []metrics.Names{with(vllm, func(n *metrics.Names) {
				n.Preemptions, n.PrefixHits, n.LoRAInfo = metrics.Source{}, metrics.Source{}, ""
			})}},
		{name: "info string", in: `{"replicas":[{` + a + `,"metric_names":{"cache_config_info":"fork:cache_config_info"}}]}`,
			want: []metrics.Names{with(vllm, func(n *metrics.Names) { n.CacheConfigInfo = "fork:cache_config_info" })}},
		{name: "object with label",
			in: `{"replicas":[{` + a + `,"engine":"triton","metric_names":{"waiting":{"value":"queued","label":"kind","metric":"nv_requests"}}}]}`,
			want: []metrics.Names{with(triton, func(n *metrics.Names) {
				n.Waiting = metrics.Source{Metric: "nv_requests", Label: "kind", Value: "queued"}
			})}},
		{name: "object metric only", in: `{"replicas":[{` + a + `,"engine":"triton","metric_names":{"running":{"metric":"active_requests"}}}]}`,
			want: []metrics.Names{with(triton, func(n *metrics.Names) { n.Running = metrics.Source{Metric: "active_requests"} })}},
		{name: "top level for every engine",
			in: `{"metric_names":{"waiting":"q"},"replicas":[{` + a + `},{` + b + `,"engine":"trtllm-serve"}]}`,
			want: []metrics.Names{with(vllm, func(n *metrics.Names) { n.Waiting = metrics.Source{Metric: "q"} }),
				with(trt, func(n *metrics.Names) { n.Waiting = metrics.Source{Metric: "q"} })}},
		{name: "top level after replicas",
			in:   `{"replicas":[{` + a + `,"engine":"trtllm-serve"}],"metric_names":{"waiting":"trtllm:num_requests_waiting","running":"trtllm:num_requests_running"}}`,
			want: []metrics.Names{with(trt, dynamo)}},
		{name: "replica over top level",
			in: `{"replicas":[{` + a + `,"metric_names":{"waiting":"mine","kv_usage":null}},{` + b + `}],"metric_names":{"waiting":"all","running":"all_running"}}`,
			want: []metrics.Names{
				with(vllm, func(n *metrics.Names) {
					n.Waiting, n.Running, n.KVUsage = metrics.Source{Metric: "mine"}, metrics.Source{Metric: "all_running"}, metrics.Source{}
				}),
				with(vllm, func(n *metrics.Names) {
					n.Waiting, n.Running = metrics.Source{Metric: "all"}, metrics.Source{Metric: "all_running"}
				})}},
		{name: "empty objects", in: `{"metric_names":{},"replicas":[{` + a + `,"metric_names":{}}]}`, want: []metrics.Names{vllm}},
		{name: "escaped key and quoted name", in: `{"replicas":[{` + a + `,"metric_names":{"wait\u0069ng":"vllm.queue \"depth\""}}]}`,
			want: []metrics.Names{with(vllm, func(n *metrics.Names) { n.Waiting = metrics.Source{Metric: `vllm.queue "depth"`} })}},
		{name: "name at limit", in: `{"replicas":[{` + a + `,"metric_names":{"waiting":"` + strings.Repeat("w", MaxMetricNameBytes) + `"}}]}`,
			want: []metrics.Names{with(vllm, func(n *metrics.Names) { n.Waiting = metrics.Source{Metric: strings.Repeat("w", MaxMetricNameBytes)} })}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse(%.120s) error %v", tc.in, err)
			}
			if len(cfg.Replicas) != len(tc.want) {
				t.Fatalf("Parse(%.120s) = %d replicas, want %d", tc.in, len(cfg.Replicas), len(tc.want))
			}
			for i, want := range tc.want {
				if got := cfg.Replicas[i].MetricNames; got != want {
					t.Errorf("Parse(%.120s) replica %d names = %+v, want %+v", tc.in, i, got, want)
				}
				if _, err := metrics.NewParser(cfg.Replicas[i].Engine, cfg.Replicas[i].MetricNames); err != nil {
					t.Errorf("NewParser(replica %d) = %v, want the accepted names usable", i, err)
				}
			}
		})
	}
}

// TestParseMetricNamesRejects: every malformed override refuses the whole
// configuration, naming where it is and quoting what is wrong.
func TestParseMetricNamesRejects(t *testing.T) {
	rep := func(names string) string {
		return `{"replicas":[{"name":"a","address":"10.0.0.1:1"},{"name":"b","address":"10.0.0.2:1"},{"name":"c","address":"10.0.0.3:1","metric_names":` + names + `}]}`
	}
	top := func(names string) string {
		return `{"replicas":[{"name":"a","address":"10.0.0.1:1"}],"metric_names":` + names + `}`
	}
	long := strings.Repeat("m", MaxMetricNameBytes+1)
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "unknown key", in: rep(`{"wating":"x"}`), want: `config: replicas[2].metric_names: unknown key "wating"`},
		{name: "unknown top key", in: top(`{"queue":"x"}`), want: `config: metric_names: unknown key "queue"`},
		{name: "duplicate key", in: rep(`{"waiting":"x","waiting":null}`), want: `config: replicas[2].metric_names: duplicate key "waiting"`},
		{name: "duplicate top key", in: top(`{"lora_info":null,"lora_info":"y"}`), want: `config: metric_names: duplicate key "lora_info"`},
		{name: "duplicate metric_names", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1","metric_names":{},"metric_names":{}}]}`,
			want: `config: replicas[0]: duplicate key "metric_names"`},
		{name: "not an object", in: rep(`["waiting"]`),
			want: `config: replicas[2].metric_names must be an object of field key to metric name, got array "[\"waiting\"]"`},
		{name: "top null", in: top(`null`), want: `config: metric_names must be an object of field key to metric name, got null "null"`},
		{name: "number", in: rep(`{"waiting":5}`), want: `config: replicas[2].metric_names.waiting must be a string, an object or null, got number "5"`},
		{name: "bool", in: top(`{"running":true}`), want: `config: metric_names.running must be a string, an object or null, got boolean "true"`},
		{name: "array", in: rep(`{"kv_usage":["a"]}`), want: `config: replicas[2].metric_names.kv_usage must be a string, an object or null, got array "[\"a\"]"`},
		{name: "info object", in: rep(`{"lora_info":{"metric":"x"}}`),
			want: `config: replicas[2].metric_names.lora_info must be a string or null, got object "{\"metric\":\"x\"}"`},
		{name: "info number", in: top(`{"cache_config_info":1}`), want: `config: metric_names.cache_config_info must be a string or null, got number "1"`},
		{name: "empty string", in: rep(`{"waiting":""}`), want: `config: replicas[2].metric_names.waiting must not be empty (null reads nothing)`},
		{name: "empty info", in: top(`{"lora_info":""}`), want: `config: metric_names.lora_info must not be empty (null reads nothing)`},
		{name: "too long", in: rep(`{"waiting":"` + long + `"}`),
			want: `config: replicas[2].metric_names.waiting "` + long[:80] + `"... is 257 bytes, more than the limit of 256`},
		{name: "invalid utf-8", in: rep("{\"waiting\":\"a\xffb\"}"), want: `config: replicas[2].metric_names.waiting must be valid UTF-8, got "a\xffb"`},
		{name: "object without metric", in: rep(`{"waiting":{"label":"l","value":"v"}}`), want: `config: replicas[2].metric_names.waiting needs "metric"`},
		{name: "object empty", in: rep(`{"waiting":{}}`), want: `config: replicas[2].metric_names.waiting needs "metric"`},
		{name: "label without value", in: rep(`{"waiting":{"metric":"m","label":"l"}}`),
			want: `config: replicas[2].metric_names.waiting has "label" without "value"`},
		{name: "value without label", in: top(`{"waiting":{"metric":"m","value":"v"}}`),
			want: `config: metric_names.waiting has "value" without "label"`},
		{name: "object unknown key", in: rep(`{"kv_usage":{"metric":"m","lable":"l"}}`),
			want: `config: replicas[2].metric_names.kv_usage: unknown key "lable"`},
		{name: "object duplicate key", in: rep(`{"kv_usage":{"metric":"m","metric":"n"}}`),
			want: `config: replicas[2].metric_names.kv_usage: duplicate key "metric"`},
		{name: "object number", in: rep(`{"kv_usage":{"metric":7}}`),
			want: `config: replicas[2].metric_names.kv_usage.metric must be a string, got number "7"`},
		{name: "object null metric", in: rep(`{"kv_usage":{"metric":null}}`),
			want: `config: replicas[2].metric_names.kv_usage.metric must be a string, got null "null"`},
		{name: "object empty label", in: rep(`{"kv_usage":{"metric":"m","label":"","value":"v"}}`),
			want: `config: replicas[2].metric_names.kv_usage.label must not be empty`},
		{name: "object long value", in: top(`{"kv_usage":{"metric":"m","label":"l","value":"` + long + `"}}`),
			want: `config: metric_names.kv_usage.value "` + long[:80] + `"... is 257 bytes, more than the limit of 256`},
		{name: "bad replica after good top", in: `{"metric_names":{"waiting":"q"},"replicas":[{"name":"a","address":"10.0.0.1:1","metric_names":{"waiting":1}}]}`,
			want: `config: replicas[0].metric_names.waiting must be a string, an object or null, got number "1"`},
		{name: "malformed inside", in: rep(`{"waiting":"x",}`), want: `config: malformed JSON at offset 150: want a string key`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("Parse(%.120s) = %+v, want error %q", tc.in, cfg, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("Parse(%.120s) error = %q, want %q", tc.in, err, tc.want)
			}
		})
	}
}
