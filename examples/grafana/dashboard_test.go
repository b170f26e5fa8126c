package grafana_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/hostsim"
	"github.com/gpuroute/gpuroute/plugin/proxy"
)

// pluginStats loads the built module in hostsim, configures it and returns
// the stats it defines: the names Envoy exports (wasmcustom.<name>, printed
// as <name> by /stats/prometheus), straight from the plugin, so the test
// follows every stat it adds or renames.
func pluginStats(t *testing.T) []string {
	t.Helper()
	path := os.Getenv("GPUROUTE_WASM")
	if path == "" {
		path = filepath.Join("..", "..", "build", "gpuroute.wasm")
	}
	wasm, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("plugin module not built (%v): run `make wasm` or set GPUROUTE_WASM", err)
	}
	h := hostsim.NewHost(hostsim.Options{})
	t.Cleanup(func() { h.Close() })
	ctx := context.Background()
	mod, err := h.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := h.NewVM(ctx, mod, "gpuroute", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vm.Configure("gpuroute", []byte(`{"replicas":[{"name":"a","address":"10.0.0.1:8000"}]}`)); err != nil {
		t.Fatal(err)
	}
	// The panic counter is defined at the first recovered panic, so a
	// healthy module lists it only by its name in the binding.
	names := append(h.MetricNames(), proxy.PanicsMetricName)
	slices.Sort(names)
	return names
}

type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

var statName = regexp.MustCompile(`gpuroute_[a-z0-9_]+`)

// TestDashboard: every panel has queries, every query names at least one
// stat, every stat it names is one the plugin defines, and the reasons
// panel covers every decision reason the plugin counts.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard.json: title %q, uid %q, %d panels; want all set", d.Title, d.UID, len(d.Panels))
	}
	defined := pluginStats(t)
	used := map[string]bool{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, q := range p.Targets {
			names := statName.FindAllString(q.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no gpuroute stat", p.Title, q.Expr)
			}
			for _, n := range names {
				used[n] = true
				if !slices.Contains(defined, n) {
					t.Errorf("panel %q: query %q names %s, which the plugin does not define (it defines %s)",
						p.Title, q.Expr, n, strings.Join(defined, ", "))
				}
			}
		}
	}
	for _, n := range defined {
		if strings.HasPrefix(n, "gpuroute_decisions_") && n != "gpuroute_decisions_total" && !used[n] {
			t.Errorf("the plugin counts decisions in %s, which no panel shows", n)
		}
	}
}
