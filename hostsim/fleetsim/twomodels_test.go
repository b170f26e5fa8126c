package fleetsim

import (
	"slices"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/scoring"
)

// modelBlind routes request i to replica i mod n, whatever its model: the
// control that shows the runner catches a replica lacking the model.
type modelBlind struct{ f *Fleet }

func (p *modelBlind) Name() string          { return "model-blind" }
func (p *modelBlind) Start(f *Fleet) error  { p.f = f; return nil }
func (p *modelBlind) Advance(time.Duration) {}
func (p *modelBlind) Observe(*Event)        {}
func (p *modelBlind) Pick(_ time.Duration, req *Request, _ int) Decision {
	return Route(req.ID % p.f.Len())
}

// twoModelsRun is the two-models workload, shortened, on its fleet.
func twoModelsRun(t *testing.T) (Config, *Workload) {
	t.Helper()
	w, err := Generate("two-models", WorkloadOptions{Seed: 1, Duration: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	reps, err := ParseHardware(w.Hardware, 0)
	if err != nil {
		t.Fatal(err)
	}
	var models []string
	for _, r := range w.Requests {
		if !slices.Contains(models, r.Model) {
			models = append(models, r.Model)
		}
	}
	if len(models) != 2 {
		t.Fatalf("two-models requests name models %q, want two", models)
	}
	return Config{Replicas: reps, Seed: 1}, w
}

// checkOwnModel fails unless every request of w completed on a replica
// serving its model.
func checkOwnModel(t *testing.T, w *Workload, s *Summary) {
	t.Helper()
	if s.WrongModel != 0 || s.Completed != len(w.Requests) {
		t.Errorf("%s(two-models): %d requests on a replica lacking their model, completed %d of %d; want 0 and all",
			s.Policy, s.WrongModel, s.Completed, len(w.Requests))
	}
}

// TestTwoModelsEachOnItsOwn: on the two-models fleet no baseline sends a
// request to a replica that does not serve its model (the engine would
// answer 404), and every request completes; a router blind to models
// does send some there, and they fail.
func TestTwoModelsEachOnItsOwn(t *testing.T) {
	cfg, w := twoModelsRun(t)
	res, err := RunPolicies(cfg, w, BaselineNames, PolicyOptions{Seed: 1}, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		checkOwnModel(t, w, &r.Summary)
	}
	blind, err := Run(cfg, w, &modelBlind{})
	if err != nil {
		t.Fatal(err)
	}
	if s := blind.Summary; s.WrongModel == 0 || s.Failed != s.WrongModel {
		t.Errorf("model-blind(two-models): wrong model %d, failed %d; want some, all of them failed", s.WrongModel, s.Failed)
	}
}

// TestGPURouteTwoModels: the plugin, configured with each replica's
// models, model_profile and tensor_parallel, sends every request to a
// replica serving its model.
func TestGPURouteTwoModels(t *testing.T) {
	wasm := gpurouteWasm(t)
	cfg, w := twoModelsRun(t)
	p, err := NewGPURoute(PolicyOptions{WasmPath: wasm, Workers: 2, Gateways: 1})
	if err != nil {
		t.Fatalf("NewGPURoute = %v", err)
	}
	res, err := Run(cfg, w, p)
	if err != nil {
		t.Fatalf("Run(gpuroute, two-models) = %v", err)
	}
	checkOwnModel(t, w, &res.Summary)
}

// TestParseHardwareModels: a fleet spec part names the tensor-parallel
// degree and the model shape; the replica serves the shape's model at
// scoring.NewProfile's cost.
func TestParseHardwareModels(t *testing.T) {
	for _, tt := range []struct {
		name, spec, gpu, shape, model string
		tp                            int
		ok                            bool
	}{
		{name: "reference", spec: "l40s", gpu: "l40s", shape: scoring.ReferenceModel, model: DefaultModel, tp: 1, ok: true},
		{name: "70b on tp4", spec: "4xh100/llama-3-70b", gpu: "h100", shape: "llama-3-70b", model: Model70B, tp: 4, ok: true},
		{name: "gpu name with an x", spec: "8xmi300x/qwen3-32b", gpu: "mi300x", shape: "qwen3-32b", model: "qwen3-32b", tp: 8, ok: true},
		{name: "no tp prefix", spec: "mi300x", gpu: "mi300x", shape: scoring.ReferenceModel, model: DefaultModel, tp: 1, ok: true},
		{name: "zero tp", spec: "0xh100", ok: false},
		{name: "unknown shape", spec: "h100/llama-9", ok: false},
		{name: "weights do not fit", spec: "l4/llama-3-405b", ok: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHardware(tt.spec, 0)
			if (err == nil) != tt.ok {
				t.Fatalf("ParseHardware(%q) error = %v, want ok %v", tt.spec, err, tt.ok)
			}
			if !tt.ok {
				return
			}
			m, _ := scoring.LookupModelShape(tt.shape)
			want, _ := scoring.NewProfile(tt.gpu, m, tt.tp)
			if r := got[0]; len(got) != 1 || r.Hardware != want || r.Shape != tt.shape || r.Model != tt.model || r.TensorParallel != tt.tp {
				t.Errorf("ParseHardware(%q) = %+v; want %s, shape %s, model %s, TP %d", tt.spec, got, tt.gpu, tt.shape, tt.model, tt.tp)
			}
		})
	}
}
