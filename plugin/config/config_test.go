package config

import (
	"github.com/gpuroute/gpuroute/plugin/metrics"
	"github.com/gpuroute/gpuroute/scoring"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

const example = `{"replicas":[{"name":"vllm-0","address":"10.0.0.1:8000","metrics_cluster":"vllm-0-metrics","engine":"vllm","hardware":"h100","state":"active"}],"tick_ms":1000}`

func TestParseExample(t *testing.T) {
	cfg, err := Parse([]byte(example))
	if err != nil {
		t.Fatalf("Parse(example) error %v", err)
	}
	want := Replica{
		Name: "vllm-0", Address: netip.MustParseAddrPort("10.0.0.1:8000"), AddressText: "10.0.0.1:8000",
		MetricsCluster: "vllm-0-metrics", MetricsPath: "/metrics", Engine: metrics.EngineVLLM,
		MetricNames: metrics.DefaultNames(metrics.EngineVLLM), Hardware: "h100", ModelProfile: scoring.ReferenceModel,
		TensorParallel: 1, Profile: scoring.DefaultHardware(), State: StateActive, AdapterSlots: -1,
	}
	if len(cfg.Replicas) != 1 || !reflect.DeepEqual(cfg.Replicas[0], want) || cfg.TickMillis != 1000 {
		t.Errorf("Parse(example) = %+v, want one replica %+v and tick 1000", cfg, want)
	}
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		check func(*Config) bool
	}{
		{name: "defaults", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}]}`, check: func(c *Config) bool {
			r := c.Replicas[0]
			return c.TickMillis == DefaultTickMillis && r.Engine == metrics.EngineVLLM && r.State == StateActive
		}},
		{name: "ipv6 canonical", in: `{"replicas":[{"name":"a","address":"[2001:DB8::1]:80"}]}`, check: func(c *Config) bool {
			return c.Replicas[0].AddressText == "[2001:db8::1]:80"
		}},
		{name: "draining with deadline", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1","state":"draining","drain_deadline_ms":1767225600000}]}`, check: func(c *Config) bool {
			return c.Replicas[0].State == StateDraining && c.Replicas[0].DrainDeadlineUnixMillis == 1767225600000
		}},
		{name: "removed drain", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}],"removed_drain_ms":0}`, check: func(c *Config) bool {
			return c.RemovedDrainMillis == 0
		}},
		{name: "removed drain default", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}]}`, check: func(c *Config) bool {
			return c.RemovedDrainMillis == DefaultRemovedDrainMillis
		}},
		{name: "drained", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1","state":"drained"},{"name":"b","address":"10.0.0.2:1"}]}`, check: func(c *Config) bool {
			return c.Replicas[0].State == StateDrained && c.Replicas[1].State == StateActive
		}},
		{name: "whitespace and escapes", in: " {\n\"replicas\" : [ {\"name\":\"a\\u0062\",\"address\":\"10.0.0.1:1\"} ] , \"tick_ms\" : 50 }\n", check: func(c *Config) bool {
			return c.Replicas[0].Name == "ab" && c.TickMillis == 50
		}},
		{name: "routing keys", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1","hardware":"L4","adapter_slots":4,"adapter_host_slots":16,"kv_capacity_tokens":40000,"metrics_path":"/prometheus/metrics"}],` +
			`"adapters":{"sql-lora":"llama-3-8b"},"block_chars":128,"max_body_bytes":65536,"scrape_timeout_ms":200,"lease_ms":900,` +
			`"unhealthy_after_failures":5,"decision_header":true,"status_path":"/gpuroute/status","max_wait_ms":2500,"fallbacks":2,` +
			`"stale_after_ms":500,"stale_penalty_ms":100,"adapter_memory_ms":0,"adapter_host_memory_ms":120000,"adapter_tolerance_ms":20,"tie_epsilon_ms":3,"prefill_chunk_tokens":2048}`,
			check: func(c *Config) bool {
				r, p := c.Replicas[0], c.Params
				a, ok := c.LookupAdapter([]byte("sql-lora"))
				return r.Hardware == "l4" && r.Profile.Name == "l4" && r.AdapterSlots == 4 && r.AdapterHostSlots == 16 && r.KVCapacityTokens == 40000 &&
					r.MetricsPath == "/prometheus/metrics" && ok && a.Base == "llama-3-8b" && c.BlockChars == 128 &&
					c.MaxBodyBytes == 65536 && c.ScrapeTimeoutMillis == 200 && c.LeaseMillis == 900 && c.UnhealthyAfterFailures == 5 &&
					c.DecisionHeader && c.StatusPath == "/gpuroute/status" && c.MaxWaitSec == 2.5 && c.Fallbacks == 2 &&
					p.StaleAfter == 500*time.Millisecond && p.StalePenaltySec == 0.1 && p.AdapterMemory == 0 &&
					p.AdapterToleranceSec == 0.02 && p.AdapterHostMemory == 2*time.Minute && p.TieEpsilonSec == 0.003 && p.PrefillChunkTokens == 2048
			}},
		{name: "lease defaults to three ticks", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}],"tick_ms":500}`, check: func(c *Config) bool {
			_, isAdapter := c.LookupAdapter([]byte("llama-3-8b"))
			return c.LeaseMillis == 1500 && !isAdapter && c.MaxBodyBytes == DefaultMaxBodyBytes && c.Replicas[0].AdapterSlots == -1
		}},
		{name: "engine feedback defaults", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}]}`, check: func(c *Config) bool {
			return !c.LearnKVCapacity && c.RecordAnswers && c.SessionHeader == ""
		}},
		{name: "engine feedback keys", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}],"learn_kv_capacity":true,"record_answers":false,"session_header":"x-session-id"}`, check: func(c *Config) bool {
			return c.LearnKVCapacity && !c.RecordAnswers && c.SessionHeader == "x-session-id"
		}},
		{name: "scraper role", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}],"role":"scraper"}`, check: func(c *Config) bool {
			return c.Scraper
		}},
		{name: "worker role", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}],"role":"worker"}`, check: func(c *Config) bool {
			return !c.Scraper
		}},
		{name: "metrics address through a shared cluster", in: `{"replicas":[{"name":"a","address":"10.0.0.1:8000","metrics_cluster":"gpuroute_metrics","metrics_address":"10.0.0.1:9090"},` +
			`{"name":"b","address":"[2001:DB8::2]:8000","metrics_cluster":"gpuroute_metrics","metrics_address":"[2001:DB8::2]:8000"}]}`, check: func(c *Config) bool {
			a, b := c.Replicas[0], c.Replicas[1]
			return a.MetricsAddress == netip.MustParseAddrPort("10.0.0.1:9090") && a.MetricsAddressText == "10.0.0.1:9090" &&
				b.MetricsAddressText == "[2001:db8::2]:8000" && a.MetricsCluster == b.MetricsCluster
		}},
		{name: "no metrics address", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1","metrics_cluster":"a-metrics"}]}`, check: func(c *Config) bool {
			return !c.Replicas[0].MetricsAddress.IsValid() && c.Replicas[0].MetricsAddressText == ""
		}},
		{name: "engines", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1","engine":"sglang"},{"name":"b","address":"10.0.0.1:2","engine":"tgi"},{"name":"c","address":"10.0.0.1:3","engine":"triton"}]}`, check: func(c *Config) bool {
			return c.Replicas[2].Engine == metrics.EngineTriton
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse(%s) error %v", tc.in, err)
			}
			if !tc.check(cfg) {
				t.Errorf("Parse(%s) = %+v, fails the check", tc.in, cfg)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	r := func(fields string) string { return `{"name":"x","address":"10.0.0.9:9"` + fields + `}` }
	three := `{"replicas":[{"name":"a","address":"10.0.0.1:1"},{"name":"b","address":"10.0.0.2:1"},`
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "address without port", in: three + `{"name":"c","address":"10.0.0.1"}]}`,
			want: `config: replicas[2].address "10.0.0.1" is not ip:port`},
		{name: "hostname", in: `{"replicas":[{"name":"a","address":"vllm:8000"}]}`,
			want: `config: replicas[0].address "vllm:8000" is not ip:port`},
		{name: "port zero", in: `{"replicas":[{"name":"a","address":"10.0.0.1:0"}]}`,
			want: `config: replicas[0].address "10.0.0.1:0" has port 0`},
		{name: "unspecified", in: `{"replicas":[{"name":"a","address":"0.0.0.0:80"}]}`,
			want: `config: replicas[0].address "0.0.0.0:80" is an unspecified address`},
		{name: "control character in name", in: `{"replicas":[{"name":"a\nb","address":"10.0.0.1:1"}]}`,
			want: `config: replicas[0].name "a\nb" must not contain control characters`},
		{name: "removed drain bound", in: `{"replicas":[` + r(``) + `],"removed_drain_ms":3600001}`,
			want: `config: removed_drain_ms must be in [0, 3600000], got 3600001`},
		{name: "metrics address without cluster", in: `{"replicas":[` + r(`,"metrics_address":"10.0.0.9:9090"`) + `]}`,
			want: `config: replicas[0].metrics_address needs metrics_cluster, the original-destination cluster that reaches it`},
		{name: "metrics address hostname", in: `{"replicas":[` + r(`,"metrics_cluster":"m","metrics_address":"vllm-0:9090"`) + `]}`,
			want: `config: replicas[0].metrics_address "vllm-0:9090" is not ip:port`},
		{name: "metrics address port zero", in: `{"replicas":[` + r(`,"metrics_cluster":"m","metrics_address":"10.0.0.9:0"`) + `]}`,
			want: `config: replicas[0].metrics_address "10.0.0.9:0" has port 0`},
		{name: "metrics address unspecified", in: `{"replicas":[` + r(`,"metrics_cluster":"m","metrics_address":"[::]:9090"`) + `]}`,
			want: `config: replicas[0].metrics_address "[::]:9090" is an unspecified address`},
		{name: "duplicate name", in: three + `{"name":"a","address":"10.0.0.3:1"}]}`,
			want: `config: replicas[2].name "a" duplicates replicas[0].name`},
		{name: "empty list", in: `{"replicas":[]}`, want: `config: replicas must list at least one replica`},
		{name: "missing list", in: `{"tick_ms":5}`, want: `config: replicas must list at least one replica`},
		{name: "unknown top key", in: `{"replicas":[` + r(``) + `],"tick":5}`, want: `config: unknown key "tick"`},
		{name: "unknown replica key", in: `{"replicas":[` + r(`,"nmae":"y"`) + `]}`, want: `config: replicas[0]: unknown key "nmae"`},
		{name: "duplicate top key", in: `{"tick_ms":5,"tick_ms":6}`, want: `config: duplicate key "tick_ms"`},
		{name: "duplicate replica key", in: `{"replicas":[` + r(`,"name":"y"`) + `]}`, want: `config: replicas[0]: duplicate key "name"`},
		{name: "bad state", in: `{"replicas":[` + r(`,"state":"paused"`) + `]}`,
			want: `config: replicas[0].state "paused" is not one of active, draining, drained`},
		{name: "unknown hardware", in: `{"replicas":[` + r(`,"hardware":"tpu"`) + `]}`,
			want: `config: replicas[0].hardware "tpu" is not a known GPU class (b200, mi300x, h200, h100, a100, l40s, l4)`},
		{name: "adapter slots bound", in: `{"replicas":[` + r(`,"adapter_slots":5000`) + `]}`,
			want: `config: replicas[0].adapter_slots must be in [-1, 1024], got 5000`},
		{name: "body limit bound", in: `{"replicas":[` + r(``) + `],"max_body_bytes":104857600}`,
			want: `config: max_body_bytes must be in [1024, 1048576], got 104857600`},
		{name: "block size bound", in: `{"replicas":[` + r(``) + `],"block_chars":2}`,
			want: `config: block_chars must be in [8, 4096], got 2`},
		{name: "status path", in: `{"replicas":[` + r(``) + `],"status_path":"status"}`,
			want: `config: status_path "status" must be empty or a path starting with / (at most 256 bytes)`},
		{name: "unknown role", in: `{"replicas":[` + r(``) + `],"role":"leader"}`,
			want: `config: role "leader" must be "worker" or "scraper"`},
		{name: "decision header type", in: `{"replicas":[` + r(``) + `],"decision_header":"yes"}`,
			want: `config: decision_header must be true or false, got string "yes"`},
		{name: "learned capacity type", in: `{"replicas":[` + r(``) + `],"learn_kv_capacity":1}`,
			want: `config: learn_kv_capacity must be true or false, got number "1"`},
		{name: "session header name", in: `{"replicas":[` + r(``) + `],"session_header":"X-Session-Id"}`,
			want: `config: session_header "X-Session-Id" must be a lowercase header name (a-z, 0-9, '-', '_', '.')`},
		{name: "session header empty", in: `{"replicas":[` + r(``) + `],"session_header":""}`,
			want: `config: session_header "" must be a header name of 1 to 128 bytes`},
		{name: "adapters type", in: `{"replicas":[` + r(``) + `],"adapters":["a"]}`,
			want: `config: adapters must be an object of adapter name to base model, got array`},
		{name: "adapter base", in: `{"replicas":[` + r(``) + `],"adapters":{"a":""}}`,
			want: `config: adapters entry "a": "" needs an adapter name and a base model of 1 to 256 bytes`},
		{name: "bad engine", in: `{"replicas":[` + r(`,"engine":"ollama"`) + `]}`,
			want: `config: replicas[0].engine "ollama" is not one of vllm, sglang, tgi, triton, trtllm-serve`},
		{name: "deadline when active", in: `{"replicas":[` + r(`,"drain_deadline_ms":5`) + `]}`,
			want: `config: replicas[0].drain_deadline_ms is only allowed with state "draining", got state ""`},
		{name: "negative deadline", in: `{"replicas":[` + r(`,"state":"draining","drain_deadline_ms":-5`) + `]}`,
			want: `config: replicas[0].drain_deadline_ms must be > 0, got -5`},
		{name: "tick zero", in: `{"replicas":[` + r(``) + `],"tick_ms":0}`, want: `config: tick_ms must be in [1, 3600000], got 0`},
		{name: "tick float", in: `{"replicas":[` + r(``) + `],"tick_ms":1.5}`, want: `config: tick_ms must be an integer, got "1.5"`},
		{name: "tick string", in: `{"replicas":[` + r(``) + `],"tick_ms":"5"}`, want: `config: tick_ms must be a number, got string "5"`},
		{name: "name number", in: `{"replicas":[{"name":5,"address":"10.0.0.1:1"}]}`, want: `config: replicas[0].name must be a string, got number "5"`},
		{name: "missing address", in: `{"replicas":[{"name":"a"}]}`, want: `config: replicas[0].address is required`},
		{name: "missing name", in: `{"replicas":[{"address":"10.0.0.1:1"}]}`, want: `config: replicas[0].name is required`},
		{name: "replicas object", in: `{"replicas":{}}`, want: `config: replicas must be an array, got object`},
		{name: "replica string", in: `{"replicas":["a"]}`, want: `config: replicas[0] must be an object, got string`},
		{name: "not an object", in: `[1]`, want: `config: want a JSON object, got "[1]"`},
		{name: "empty", in: ``, want: `config: want a JSON object, got ""`},
		{name: "trailing data", in: `{"replicas":[` + r(``) + `]} x`, want: `config: trailing data after the object: " x"`},
		{name: "scrape timeout at stale bound", in: `{"replicas":[` + r(``) + `],"scrape_timeout_ms":2000}`,
			want: `config: scrape_timeout_ms must be less than stale_after_ms, got scrape_timeout_ms 2000 and stale_after_ms 2000`},
		{name: "stale bound under default scrape timeout", in: `{"replicas":[` + r(``) + `],"stale_after_ms":500}`,
			want: `config: scrape_timeout_ms must be less than stale_after_ms, got scrape_timeout_ms 1000 and stale_after_ms 500`},
		{name: "passive failures bound", in: `{"replicas":[` + r(``) + `],"passive_failures":1001}`,
			want: `config: passive_failures must be in [0, 1000], got 1001`},
		{name: "passive backoff bound", in: `{"replicas":[` + r(``) + `],"passive_backoff_ms":30001}`,
			want: `config: passive_backoff_ms must be in [1, 30000], got 30001`},
		{name: "passive backoff zero", in: `{"replicas":[` + r(``) + `],"passive_backoff_ms":0}`,
			want: `config: passive_backoff_ms must be in [1, 30000], got 0`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("Parse(%s) = %+v, want error %q", tc.in, cfg, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("Parse(%s) error = %q, want %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestParseBounds(t *testing.T) {
	build := func(n int) []byte {
		var b strings.Builder
		b.WriteString(`{"replicas":[`)
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"name":"r`)
			b.WriteString(itoa(i))
			b.WriteString(`","address":"10.0.`)
			b.WriteString(itoa(i / 256))
			b.WriteByte('.')
			b.WriteString(itoa(i % 256))
			b.WriteString(`:8000"}`)
		}
		b.WriteString(`]}`)
		return []byte(b.String())
	}
	if cfg, err := Parse(build(MaxReplicas)); err != nil || len(cfg.Replicas) != MaxReplicas {
		t.Errorf("Parse(%d replicas) error %v, want success", MaxReplicas, err)
	}
	_, err := Parse(build(MaxReplicas + 1))
	if want := "config: replicas has more than 4096 entries"; err == nil || err.Error() != want {
		t.Errorf("Parse(%d replicas) error = %v, want %q", MaxReplicas+1, err, want)
	}
}

// TestParseLengthBounds: names, clusters and paths past their limits, and a
// configuration past MaxConfigBytes, are refused with the limit and the
// value's beginning quoted (never the whole value); the limits themselves
// are accepted.
func TestParseLengthBounds(t *testing.T) {
	one := func(fields string) string {
		return `{"replicas":[{"name":"x","address":"10.0.0.9:9"` + fields + `}]}`
	}
	long := func(c byte, n int) string { return strings.Repeat(string(c), n) }
	tests := []struct {
		name string
		in   string
		want string // "" means accepted
	}{
		{name: "name at limit", in: `{"replicas":[{"name":"` + long('n', MaxNameBytes) + `","address":"10.0.0.9:9"}]}`},
		{name: "name over", in: `{"replicas":[{"name":"` + long('n', MaxNameBytes+1) + `","address":"10.0.0.9:9"}]}`,
			want: `config: replicas[0].name "` + long('n', 80) + `"... is 254 bytes, more than the limit of 253`},
		{name: "name 64 KiB", in: `{"replicas":[{"name":"` + long('n', 64<<10) + `","address":"10.0.0.9:9"}]}`,
			want: `config: replicas[0].name "` + long('n', 80) + `"... is 65536 bytes, more than the limit of 253`},
		{name: "cluster at limit", in: one(`,"metrics_cluster":"` + long('c', MaxNameBytes) + `"`)},
		{name: "cluster over", in: one(`,"metrics_cluster":"` + long('c', MaxNameBytes+1) + `"`),
			want: `config: replicas[0].metrics_cluster "` + long('c', 80) + `"... is 254 bytes, more than the limit of 253`},
		{name: "path at limit", in: one(`,"metrics_path":"/` + long('p', MaxPathBytes-1) + `"`)},
		{name: "path over", in: one(`,"metrics_path":"/` + long('p', MaxPathBytes) + `"`),
			want: `config: replicas[0].metrics_path "/` + long('p', 79) + `"... is 1025 bytes, more than the limit of 1024`},
		{name: "config over 4 MiB", in: one(``) + long(' ', MaxConfigBytes),
			want: `config: configuration is 4194354 bytes, more than the limit of 4194304: "{\"replicas\":[{\"name\":\"x\",\"address\":\"10.0.0.9:9\"}]}` + long(' ', 80-50) + `"...`},
		{name: "config at 4 MiB", in: one(``) + long(' ', MaxConfigBytes-len(one(``)))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("Parse(%.60s…) error = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestParsePassiveDefaults: passive health checking is on by default (3
// failures, 2 s) and 0 failures turns it off.
func TestParsePassiveDefaults(t *testing.T) {
	tests := []struct {
		name         string
		in           string
		failures     int
		backoffMilli uint32
	}{
		{name: "defaults", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}]}`, failures: 3, backoffMilli: 2000},
		{name: "off", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}],"passive_failures":0}`, failures: 0, backoffMilli: 2000},
		{name: "set", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}],"passive_failures":5,"passive_backoff_ms":500}`, failures: 5, backoffMilli: 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse(%s) error %v", tc.in, err)
			}
			if cfg.PassiveFailures != tc.failures || cfg.PassiveBackoffMillis != tc.backoffMilli {
				t.Errorf("Parse(%s) = passive %d/%d ms, want %d/%d ms", tc.in, cfg.PassiveFailures, cfg.PassiveBackoffMillis, tc.failures, tc.backoffMilli)
			}
		})
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte(`{"replicas":[{"name":"a","address":"[::1]:1","state":"draining","drain_deadline_ms":1}],"tick_ms":7}`))
	f.Add([]byte(`{"replicas":[{"name":"a","address":"10.0.0.1"}]}`))
	f.Add([]byte(`{"replicas":[{"name":"\u0000","address":"1.2.3.4:5"},{"name":"\u0000"}]}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`{"replicas":[{"name":"a","address":"10.0.0.1:1","metric_names":{"waiting":"trtllm:w","kv_usage":{"metric":"m","label":"l","value":"v"},"lora_info":null},"engine":"triton"}],"metric_names":{"running":null}}`))
	f.Add([]byte(`{"replicas":[{"name":"a","address":"10.0.0.1:1"}],"peer_path":"/p","peer_token":"0123456789abcdef","peers":[{"name":"b","cluster":"c"},{"name":"b"}]}`))
	f.Add([]byte(mixedFleet))
	f.Add([]byte(`{"model_profiles":{"s":{"params_b":1.5e1,"active_params_b":2,"num_hidden_layers":4,"hidden_size":64,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":32}},` +
		`"replicas":[{"name":"a","address":"10.0.0.1:1","model_profile":"s","tensor_parallel":3,"models":["x"]},{"name":"b","address":"10.0.0.2:1","models":["x","y"]}]}`))
	f.Add([]byte(`{"replicas":[{"name":"a","address":"10.0.0.1:1","metrics_cluster":"m","metrics_address":"10.0.0.1:9"},{"name":"b","address":"10.0.0.2:1","metrics_address":"10.0.0.2:9"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("Parse returned both a config and error %v", err)
			}
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Fatalf("Parse error %q lacks the config: prefix", err)
			}
			return
		}
		if len(cfg.Replicas) == 0 || len(cfg.Replicas) > MaxReplicas {
			t.Fatalf("Parse accepted %d replicas", len(cfg.Replicas))
		}
		if cfg.TickMillis < 1 || cfg.TickMillis > MaxTickMillis {
			t.Fatalf("Parse accepted tick_ms %d", cfg.TickMillis)
		}
		names := map[string]bool{}
		for i, r := range cfg.Replicas {
			if r.Name == "" || names[r.Name] {
				t.Fatalf("replica %d has empty or duplicate name %q", i, r.Name)
			}
			names[r.Name] = true
			back, err := netip.ParseAddrPort(r.AddressText)
			if err != nil || back != r.Address || r.Address.Port() == 0 {
				t.Fatalf("replica %d address %q does not round trip: %v", i, r.AddressText, err)
			}
			if r.MetricsAddress.IsValid() {
				back, err := netip.ParseAddrPort(r.MetricsAddressText)
				if err != nil || back != r.MetricsAddress || r.MetricsCluster == "" {
					t.Fatalf("replica %d metrics_address %q does not round trip or lacks a cluster: %v", i, r.MetricsAddressText, err)
				}
			}
			if _, err := metrics.NewParser(r.Engine, r.MetricNames); err != nil {
				t.Fatalf("replica %d names %+v make no parser: %v", i, r.MetricNames, err)
			}
			if r.State > StateDrained || (r.DrainDeadlineUnixMillis != 0 && r.State != StateDraining) {
				t.Fatalf("replica %d has state %v with deadline %d", i, r.State, r.DrainDeadlineUnixMillis)
			}
			if !(r.Profile.PrefillSecPerToken > 0) || r.Profile.KVCapacityTokens < 1 || r.TensorParallel < 1 {
				t.Fatalf("replica %d has profile %+v at tensor parallel %d", i, r.Profile, r.TensorParallel)
			}
			// A replica serves every model it lists, and a replica that
			// lists none serves every model.
			for _, m := range r.Models {
				if s := cfg.ServedBy(m); s != nil && (len(s) != len(cfg.Replicas) || !s[i]) {
					t.Fatalf("ServedBy(%q) = %v, want replica %d among them", m, s, i)
				}
			}
			if s := cfg.ServedBy("\x00unlisted"); r.Models == nil && s != nil && !s[i] {
				t.Fatalf("ServedBy(unlisted) = %v, want replica %d (no models) among them", s, i)
			}
		}
	})
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	data := []byte(example)
	for i := 0; i < b.N; i++ {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}
