package metrics

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestSourceFieldKeys: every key names its own field (setting through the
// pointer changes that field and no other), the info keys name the info
// metrics, and no key names both or is repeated.
func TestSourceFieldKeys(t *testing.T) {
	var n Names
	seen := map[string]bool{}
	for f, key := range fieldKeys {
		if key == "" || seen[key] {
			t.Fatalf("fieldKeys[%d] = %q, want a distinct non-empty key", f, key)
		}
		seen[key] = true
		p := n.SourceField(key)
		if p == nil {
			t.Fatalf("SourceField(%q) = nil, want field %d", key, f)
		}
		*p = Source{Metric: "m" + strconv.Itoa(f)}
		if n.InfoField(key) != nil {
			t.Errorf("InfoField(%q) != nil, want nil (it names a Source)", key)
		}
	}
	for f, src := range n.sources() {
		if want := "m" + strconv.Itoa(f); src.Metric != want {
			t.Errorf("after setting every key, field %d (%s) = %q, want %q", f, fieldKeys[f], src.Metric, want)
		}
	}
	for _, tc := range []struct {
		name string
		key  string
		want *string
	}{
		{name: "cache config", key: KeyCacheConfigInfo, want: &n.CacheConfigInfo},
		{name: "lora", key: KeyLoRAInfo, want: &n.LoRAInfo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := n.InfoField(tc.key); got != tc.want {
				t.Errorf("InfoField(%q) = %p, want %p", tc.key, got, tc.want)
			}
			if n.SourceField(tc.key) != nil {
				t.Errorf("SourceField(%q) != nil, want nil (an info metric)", tc.key)
			}
		})
	}
	for _, key := range []string{"", "Waiting", "waiting ", "lora", "kv_capacity"} {
		if n.SourceField(key) != nil || n.InfoField(key) != nil {
			t.Errorf("SourceField(%q) or InfoField(%q) != nil, want nil for an unknown key", key, key)
		}
	}
}

// TestOverrideReadsRenamed: a parser built from overridden names reads the
// renamed series and no longer the default ones (NVIDIA Dynamo re-exports
// trtllm-serve's gauges with a "trtllm:" prefix, names.go).
func TestOverrideReadsRenamed(t *testing.T) {
	page := "trtllm:num_requests_waiting 7\ntrtllm:num_requests_running 3\ntrtllm_num_requests_waiting 99\n"
	names := DefaultNames(EngineTRTLLM)
	*names.SourceField(KeyWaiting) = Source{Metric: "trtllm:num_requests_waiting"}
	*names.SourceField(KeyRunning) = Source{Metric: "trtllm:num_requests_running"}
	*names.SourceField(KeyPreemptions) = Source{}
	p, err := NewParser(EngineTRTLLM, names)
	if err != nil {
		t.Fatalf("NewParser(trtllm-serve, overridden) = %v", err)
	}
	var s Sample
	if err := p.Parse([]byte(page), &s); err != nil {
		t.Fatalf("Parse(%q) = %v", page, err)
	}
	if s.Waiting != 7 || s.Running != 3 || !s.Has(FieldWaiting|FieldRunning) {
		t.Errorf("Parse(%q) = waiting %d running %d present %b, want 7, 3 from the trtllm: names", page, s.Waiting, s.Running, s.Present)
	}
	def := mustParser(t, EngineTRTLLM)
	err = def.Parse([]byte(strings.ReplaceAll(page, "trtllm_num_requests_waiting 99\n", "")), &s)
	if !errors.Is(err, ErrNoSamples) {
		t.Errorf("default trtllm-serve Parse of a trtllm: page = %v, want ErrNoSamples", err)
	}
}
