package fleet

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/scoring"
)

// queueHardware is a degenerate profile for queueing tests: a step costs
// stepSec whatever it holds (prefill-only or decode), prefill tokens cost
// perTokSec each, so service times are exactly what the test draws.
func queueHardware(stepSec, perTokSec float64) scoring.Hardware {
	return scoring.Hardware{Name: "queue-test", PrefillFixedSec: stepSec, PrefillSecPerToken: perTokSec,
		DecodeStepSec: stepSec, KVCapacityTokens: 1 << 22}
}

// erlangC returns the probability that an arrival waits in an M/M/c queue
// with offered load a = λ/μ (Erlang's C formula).
func erlangC(c int, a float64) float64 {
	sum, term := 0.0, 1.0
	for k := 0; k < c; k++ {
		if k > 0 {
			term *= a / float64(k)
		}
		sum += term
	}
	term *= a / float64(c)
	last := term * float64(c) / (float64(c) - a)
	return last / (sum + last)
}

// TestQueueMMc checks the batching core against M/M/c theory: one replica
// with a batch of c, a constant step time, requests whose service is a
// geometric number of decode steps (mean 1 s: the discrete exponential), so
// the batch is c servers fed by one FIFO queue. Mean wait must match
// Erlang C's Wq = C(c, a) / (cμ − λ) within 5%.
func TestQueueMMc(t *testing.T) {
	const c, lambda, steps, n = 4, 2.8, 100, 200000
	step := 10 * time.Millisecond
	rng := rand.New(rand.NewPCG(7, 7))
	w := &Workload{Name: "mmc"}
	at := 0.0
	p := 1.0 / steps
	for i := 0; i < n; i++ {
		at += rng.ExpFloat64() / lambda
		l := 1 + int(math.Floor(math.Log(1-rng.Float64())/math.Log(1-p))) // Geometric on {1, 2, ...}
		w.Requests = append(w.Requests, NewRequest(0, time.Duration(at*1e9), DefaultModel, "",
			[]Segment{{Seed: uint64(i) + 1, Tokens: 1}}, 0, l))
	}
	w.finish()
	cfg := Config{Replicas: []ReplicaConfig{{Hardware: queueHardware(step.Seconds(), 0), MaxBatch: c, MaxLoras: -1}}}
	res, err := Run(cfg, w, &roundRobin{})
	if err != nil {
		t.Fatal(err)
	}
	// TTFT = wait + the first step of service.
	got := res.Summary.TTFTMeanSec - step.Seconds()
	mu := 1 / (steps * step.Seconds())
	want := erlangC(c, lambda/mu) / (c*mu - lambda)
	t.Logf("M/M/%d ρ=%.2f: mean wait %.4f s, Erlang C %.4f s (%+.1f%%), %d events in %v (%.0f events/s)",
		c, lambda/mu/c, got, want, 100*(got-want)/want, res.Events, res.Wall, float64(res.Events)/res.Wall.Seconds())
	if math.Abs(got-want)/want > 0.05 {
		t.Errorf("M/M/%d mean wait = %.4f s, want %.4f s ± 5%%", c, got, want)
	}
}

// TestQueueMG1 checks a batch-1 replica against Pollaczek–Khinchine: service
// is a prefill of a uniform 200–1800 tokens at 1 ms/token (E[S] = 1 s),
// Poisson arrivals at ρ = 0.7; Wq = λE[S²] / (2(1 − ρ)) within 5%.
func TestQueueMG1(t *testing.T) {
	const lambda, n = 0.7, 200000
	rng := rand.New(rand.NewPCG(11, 11))
	w := &Workload{Name: "mg1"}
	at := 0.0
	var s1, s2 float64
	for i := 0; i < n; i++ {
		at += rng.ExpFloat64() / lambda
		tok := 200 + rng.IntN(1601)
		s := float64(tok) * 1e-3
		s1 += s
		s2 += s * s
		w.Requests = append(w.Requests, NewRequest(0, time.Duration(at*1e9), DefaultModel, "",
			[]Segment{{Seed: uint64(i) + 1, Tokens: tok}}, 0, 1))
	}
	w.finish()
	cfg := Config{Replicas: []ReplicaConfig{{Hardware: queueHardware(0, 1e-3), MaxBatch: 1, MaxLoras: -1, KVBlocks: 1024}}}
	res, err := Run(cfg, w, &roundRobin{})
	if err != nil {
		t.Fatal(err)
	}
	es, es2 := s1/n, s2/n
	got := res.Summary.TTFTMeanSec - es
	rho := lambda * es
	want := lambda * es2 / (2 * (1 - rho))
	t.Logf("M/G/1 ρ=%.3f: mean wait %.4f s, Pollaczek–Khinchine %.4f s (%+.1f%%)", rho, got, want, 100*(got-want)/want)
	if math.Abs(got-want)/want > 0.05 {
		t.Errorf("M/G/1 mean wait = %.4f s, want %.4f s ± 5%%", got, want)
	}
}

// runOne runs reqs on one replica and returns the per-request TTFTs in
// request order.
func runOne(t *testing.T, rc ReplicaConfig, reqs []*Request) []float64 {
	t.Helper()
	w := &Workload{Name: "one", Requests: reqs}
	w.finish()
	s := &ttftRecorder{}
	if _, err := Run(Config{Replicas: []ReplicaConfig{rc}}, w, s); err != nil {
		t.Fatal(err)
	}
	return s.ttft[:len(reqs)]
}

// ttftRecorder routes everything to replica 0 and records first-token times.
type ttftRecorder struct {
	roundRobin
	ttft []float64
}

func (p *ttftRecorder) Observe(ev *Event) {
	if ev.Kind == FirstToken {
		for len(p.ttft) <= ev.Req.ID {
			p.ttft = append(p.ttft, 0)
		}
		p.ttft[ev.Req.ID] = (ev.At - ev.Req.Arrival).Seconds()
	}
}

// TestColdWarmTTFT compares the cost model's cold and warm TTFT for a
// 10k-token prompt with the published Qwen3-32B figures (4.3 s cold vs
// 0.6 s with a warm prefix, llm-d talks: a 7.2× ratio). The built-in
// profiles are 8B single-GPU profiles whose only per-request overhead is
// PrefillFixedSec (30 ms on H100), so a fully warm prompt costs that plus one
// block: the simulated ratio is far above 7×. The published 0.6 s warm TTFT
// implies ~0.5 s of overhead outside prefill (request handling, tokenizing
// 10k tokens, scheduling, a 32B decode step) that no profile models. The test
// checks the simulator against the profile (what it promises) and logs the
// published comparison; it does not fit the profile to the talk.
func TestColdWarmTTFT(t *testing.T) {
	h := scoring.DefaultHardware()
	segs := []Segment{{Seed: 42, Tokens: 10000}}
	reqs := []*Request{
		NewRequest(0, 0, DefaultModel, "", segs, 1, 1),
		NewRequest(1, 10*time.Second, DefaultModel, "", segs, 1, 1),
	}
	ttft := runOne(t, ReplicaConfig{Hardware: h, MaxLoras: -1}, reqs)
	cold, warm := ttft[0], ttft[1]
	// Cold: two chunks at the 8192-token budget, each paying the fixed cost.
	wantCold := h.PrefillSeconds(10000) + h.PrefillFixedSec
	// Warm: all blocks but the last cached; the last 16 tokens recomputed.
	wantWarm := h.PrefillFixedSec + 16*h.PrefillSecPerToken + h.PrefillSecPerToken2*(1e8-9984*9984)
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"cold", cold, wantCold}, {"warm", warm, wantWarm}} {
		if math.Abs(c.got-c.want) > 1e-6 {
			t.Errorf("%s TTFT(10k tokens) = %.6f s, want %.6f s", c.name, c.got, c.want)
		}
	}
	ratio := cold / warm
	t.Logf("h100 profile: cold %.3f s, warm %.3f s, ratio %.1f× vs published 4.3/0.6 = 7.2× (Qwen3-32B, llm-d talks): "+
		"not reproduced within 20%%; see the test's doc comment", cold, warm, ratio)
	if !(ratio > 7.2*1.2) {
		t.Errorf("ratio %.1f× now within 20%% of the published 7.2×: update the doc comment and report", ratio)
	}
}
