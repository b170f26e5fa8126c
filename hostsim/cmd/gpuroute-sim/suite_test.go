package main

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim/fleetsim"
)

// TestRunSuite holds runSuite's bookkeeping: each workload pools its own
// seeds in seed order, a run that shares another's requests gets the same
// figures as if it had run its policies itself, and a policy that cannot
// be built is left out of every workload rather than pooled over fewer
// seeds.
func TestRunSuite(t *testing.T) {
	fleetsim.Register("unbuildable", func(fleetsim.PolicyOptions) (fleetsim.Policy, error) {
		return nil, errors.New("unbuildable: no policy")
	})
	short := func(seed int64) (*fleetsim.Workload, error) {
		return fleetsim.Generate("bimodal", fleetsim.WorkloadOptions{Seed: seed, Duration: 3 * time.Second})
	}
	runs := []demoRun{
		{load: short, seeds: 2, requests: "bimodal"},
		{load: short, seeds: 3, requests: "bimodal", policies: []string{"least-tokens", "unbuildable"}},
	}
	names := []string{"round-robin", "least-tokens", "unbuildable"}
	o := options{seed: 5, parallel: 2}
	got, err := runSuite(runs, names, o)
	if err != nil {
		t.Fatal(err)
	}

	// What each policy's runs give when run one seed at a time.
	bySeed := func(policy string, seeds int) []float64 {
		var out []float64
		for k := range seeds {
			seed := o.seed + int64(k)
			w, err := short(seed)
			if err != nil {
				t.Fatal(err)
			}
			reps, err := fleetsim.ParseHardware(w.Hardware, 0)
			if err != nil {
				t.Fatal(err)
			}
			res, err := fleetsim.RunPolicies(fleetsim.Config{Replicas: reps, Seed: seed}, w, []string{policy}, fleetsim.PolicyOptions{Seed: seed}, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, res[0].Summary.TTFTMeanSec)
		}
		return out
	}
	want := []struct {
		run      int
		policies []string
		seeds    int
	}{
		{0, []string{"round-robin", "least-tokens"}, 2},
		{1, []string{"least-tokens"}, 3},
	}
	if len(got) != len(runs) {
		t.Fatalf("runSuite(%d runs) = %d results", len(runs), len(got))
	}
	for _, w := range want {
		r := got[w.run]
		var policies []string
		for _, res := range r.Results {
			policies = append(policies, res.Summary.Policy)
		}
		if !slices.Equal(policies, w.policies) {
			t.Errorf("run %d: policies %q, want %q", w.run, policies, w.policies)
		}
		if r.Seeds != w.seeds {
			t.Errorf("run %d: seeds %d, want %d", w.run, r.Seeds, w.seeds)
		}
		for _, res := range r.Results {
			if g, want := res.Summary.TTFTMeanBySeedSec, bySeed(res.Summary.Policy, w.seeds); !slices.Equal(g, want) {
				t.Errorf("run %d, %s: mean TTFT by seed %v, want %v", w.run, res.Summary.Policy, g, want)
			}
		}
	}
}
