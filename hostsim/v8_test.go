package hostsim

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpuroute/gpuroute/internal/longtest"
)

// v8Result is what v8/requestpath.mjs prints.
type v8Result struct {
	Engine         string   `json:"engine"`
	Requests       int      `json:"requests"`
	Routed         int      `json:"routed"`
	Misrouted      int      `json:"misrouted"`
	Decisions      int      `json:"decisions"`
	Scrapes        int      `json:"scrapes"`
	ScrapeFailures int      `json:"scrape-failures"`
	PrefixHitShare float64  `json:"prefix-hit-share"`
	Errors         []string `json:"errors"`
	P50Micros      float64  `json:"p50-µs"`
	MinP99Micros   float64  `json:"min-p99-µs"`
}

// TestV8RequestPath runs v8/requestpath.mjs, the request-path benchmark
// under V8, briefly on the real module: its JavaScript host must drive the
// module as hostsim does, or its figures mean nothing. Every request is
// routed to a configured replica and counted as one decision, every scrape
// parses, the shared system prompts hit the prefix index, nothing is logged
// at error level. Skipped without Node.js 20 or later.
func TestV8RequestPath(t *testing.T) {
	longtest.Skip(t)
	realWasm(t)
	node, err := NodeWASI()
	if err != nil {
		t.Skip(err)
	}
	const requests, warmup = 300, 3000
	// It exits 1 when a check of its own fails; its figures say which.
	out, err := exec.Command(node, "--no-liftoff", filepath.Join("v8", "requestpath.mjs"), realWasmPath(), "300").Output()
	if _, failed := err.(*exec.ExitError); err != nil && !failed {
		t.Fatalf("node requestpath.mjs: %v", err)
	}
	var r v8Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("requestpath.mjs printed %q: %v", out, err)
	}
	if r.Requests != requests || r.Routed != requests || r.Misrouted != 0 {
		t.Errorf("requests %d, routed %d, misrouted %d; want %d, %d, 0", r.Requests, r.Routed, r.Misrouted, requests, requests)
	}
	if r.Decisions != warmup+requests {
		t.Errorf("decisions counted = %d, want %d (one per request, warm-up included)", r.Decisions, warmup+requests)
	}
	// A tick every 100 requests scrapes all 64 replicas.
	if want := (warmup + requests - 1) / 100 * 64; r.Scrapes != want || r.ScrapeFailures != 0 {
		t.Errorf("scrapes %d, failed %d; want %d, 0", r.Scrapes, r.ScrapeFailures, want)
	}
	if r.PrefixHitShare < 0.5 {
		t.Errorf("prefix hit share = %v, want most prompt tokens cached (six shared system prompts)", r.PrefixHitShare)
	}
	if len(r.Errors) > 0 {
		t.Errorf("module logged errors: %q", r.Errors)
	}
	if !(r.P50Micros > 0 && r.MinP99Micros > 0) {
		t.Errorf("p50 %v µs, min-p99 %v µs: want times", r.P50Micros, r.MinP99Micros)
	}
	t.Logf("%s: p50 %.1f µs, each request's best of three p99 %.1f µs", r.Engine, r.P50Micros, r.MinP99Micros)
}

func TestCheckNodeVersion(t *testing.T) {
	tests := []struct {
		name, in string
		ok       bool
	}{
		{name: "current", in: "v20.20.2", ok: true},
		{name: "newer", in: "v24.1.0", ok: true},
		{name: "older", in: "v18.19.1", ok: false},
		{name: "not a version", in: "node: command failed", ok: false},
		{name: "empty", in: "", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := checkNodeVersion(tt.in); (err == nil) != tt.ok {
				t.Errorf("checkNodeVersion(%q) = %v, want ok %v", tt.in, err, tt.ok)
			}
		})
	}
}
