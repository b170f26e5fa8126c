package fleetsim

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestFlowCapacity holds flowCapacity to what the simulated fleet
// sustains: at 85% of it least-tokens keeps a short queue, at 115% its
// time to first token grows with the run.
func TestFlowCapacity(t *testing.T) {
	run := func(rate float64) Summary {
		rng := rand.New(rand.NewPCG(1, 9))
		sys := flowRequests.systemPrompts(rng)
		w := &Workload{Name: "capacity"}
		for _, at := range arrivals(rng, []Stage{{rate, 60 * time.Second}}, WorkloadOptions{}) {
			w.Requests = append(w.Requests, flowRequests.request(rng, sys, at))
		}
		res, err := Run(Config{Replicas: UniformReplicas(4, "h100"), Seed: 1}, w.finish(), &leastTokens{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Summary
	}
	if s := run(0.85 * flowCapacity); s.TTFTP50Sec > 0.5 {
		t.Errorf("at 85%% of capacity, least-tokens' TTFT p50 = %.2f s, want < 0.5 s", s.TTFTP50Sec)
	}
	if s := run(1.15 * flowCapacity); s.TTFTP50Sec < 3 {
		t.Errorf("at 115%% of capacity, least-tokens' TTFT p50 = %.2f s, want > 3 s (queues growing)", s.TTFTP50Sec)
	}
}

// TestFlowWorkloads: the priority and fairness workloads carry their
// classes and headers in the proportions they promise.
func TestFlowWorkloads(t *testing.T) {
	count := func(name string) map[string]int {
		w, err := Generate(name, WorkloadOptions{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		c := map[string]int{}
		for _, r := range w.Requests {
			c[r.Class]++
			if r.Class != r.Priority && r.Class != r.Tenant {
				t.Fatalf("%s request of class %q sends priority %q tenant %q", name, r.Class, r.Priority, r.Tenant)
			}
		}
		c["all"] = len(w.Requests)
		return c
	}
	p := count("priority")
	if share := float64(p[ClassCritical]) / float64(p["all"]); share < 0.27 || share > 0.33 {
		t.Errorf("priority: critical share %.3f, want 0.30", share)
	}
	if rate := float64(p["all"]) / 90; rate < 1.2*flowCapacity || rate > 1.4*flowCapacity {
		t.Errorf("priority: %.1f requests/s, want 1.3 × %d", rate, flowCapacity)
	}
	f := count("fairness")
	if ratio := float64(f[ClassHeavy]) / float64(f[ClassLight]); ratio < 8.5 || ratio > 11.5 {
		t.Errorf("fairness: heavy/light = %.2f, want 10", ratio)
	}
}
