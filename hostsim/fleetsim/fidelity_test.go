package fleetsim

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/internal/longtest"
	"github.com/gpuroute/gpuroute/scoring"
)

// queueHardware is a degenerate profile for queueing tests: a step costs
// stepSec whatever it holds (prefill-only or decode), prefill tokens cost
// perTokSec each, so service times are exactly what the test draws.
func queueHardware(stepSec, perTokSec float64) scoring.Hardware {
	return scoring.Hardware{Name: "queue-test", PrefillFixedSec: stepSec, PrefillSecPerToken: perTokSec,
		DecodeStepSec: stepSec, KVCapacityTokens: 1 << 22}
}

// fidelityRequests is how many requests the queueing tests draw: enough
// that sampling error stays well inside their 5% tolerance, and twice that
// in the long run.
func fidelityRequests() int {
	if longtest.Enabled() {
		return 200000
	}
	return 100000
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
	const c, lambda, steps = 4, 2.8, 100
	n := fidelityRequests()
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
	const lambda = 0.7
	n := fidelityRequests()
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
	es, es2 := s1/float64(n), s2/float64(n)
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

// TestColdWarmTTFT compares the cost model's cold and warm TTFT with the
// published Qwen3-32B figures (llm-d talks, quoted e.g. at
// animesh.cloud/2025/01/14/llm-inference-kv-cache-routing: "a 6,000-token
// system prompt takes about 4.3 seconds cold; with KV cache, the second
// request takes 0.6 seconds", a 7.2× ratio, for the GIE preset's request of
// 6,000 shared + 1,200 question tokens). That ratio is out of reach of any
// prefill cost model that is monotone in the tokens computed: the warm
// request still prefills 1,200 of 7,200 tokens, linear work bounds the
// ratio by 7,200/1,200 = 6, and the attention term (which shrinks less on a
// warm request: 7,200² − 6,000² of 7,200²) and fixed costs only lower it. So
// the published warm figure includes something other than prefill (or the
// two figures come from different conditions), and the test checks that the
// simulator honours the bound and the profile's own arithmetic instead of
// fitting a profile to the talk. The "10k-token prompt" variant,
// fully cached but for one block, is also reported: the built-in profiles'
// only per-request overhead is PrefillFixedSec (30 ms on H100), so that ratio
// is far above 7×.
func TestColdWarmTTFT(t *testing.T) {
	h := scoring.DefaultHardware()
	const system, question = 6000, 1200
	shared := Segment{Seed: 42, Tokens: system}
	reqs := []*Request{
		NewRequest(0, 0, DefaultModel, "", []Segment{shared, {Seed: 43, Tokens: question}}, 1, 1),
		NewRequest(1, 10*time.Second, DefaultModel, "", []Segment{shared, {Seed: 45, Tokens: question}}, 1, 1),
	}
	ttft := runOne(t, ReplicaConfig{Hardware: h, MaxLoras: -1}, reqs)
	cold, warm := ttft[0], ttft[1]
	const n = system + question
	wantCold := h.PrefillSeconds(n)
	// The 6,000 shared tokens are 375 whole 16-token blocks, all cached.
	wantWarm := h.PrefillFixedSec + question*h.PrefillSecPerToken + h.PrefillSecPerToken2*(n*n-system*system)
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"cold", cold, wantCold}, {"warm", warm, wantWarm}} {
		if math.Abs(c.got-c.want) > 1e-6 {
			t.Errorf("%s TTFT(%d shared + %d new tokens) = %.6f s, want %.6f s", c.name, system, question, c.got, c.want)
		}
	}
	ratio := cold / warm
	if bound := float64(n) / question; !(ratio > 1 && ratio <= bound) {
		t.Errorf("cold/warm TTFT ratio = %.2f×, want in (1, %.0f×]: a warm request prefills %d of %d tokens", ratio, bound, question, n)
	}
	t.Logf("h100 profile, %d shared + %d new tokens: cold %.3f s, warm %.3f s, ratio %.1f× (published 4.3/0.6 = 7.2× for Qwen3-32B, above the %.0f× any prefill model allows)",
		system, question, cold, warm, ratio, float64(n)/question)

	full := []Segment{{Seed: 44, Tokens: 10000}}
	ttft = runOne(t, ReplicaConfig{Hardware: h, MaxLoras: -1}, []*Request{
		NewRequest(0, 0, DefaultModel, "", full, 1, 1),
		NewRequest(1, 10*time.Second, DefaultModel, "", full, 1, 1),
	})
	// Cold: two chunks at the 8192-token budget, each paying the fixed cost.
	wantCold = h.PrefillSeconds(10000) + h.PrefillFixedSec
	// Warm: all blocks but the last cached; the last 16 tokens recomputed.
	wantWarm = h.PrefillFixedSec + 16*h.PrefillSecPerToken + h.PrefillSecPerToken2*(1e8-9984*9984)
	if math.Abs(ttft[0]-wantCold) > 1e-6 || math.Abs(ttft[1]-wantWarm) > 1e-6 {
		t.Errorf("TTFT(10k tokens) cold, warm = %.6f, %.6f s; want %.6f, %.6f s", ttft[0], ttft[1], wantCold, wantWarm)
	}
	t.Logf("h100 profile, 10k tokens fully cached but the last block: cold %.3f s, warm %.3f s, ratio %.0f×", ttft[0], ttft[1], ttft[0]/ttft[1])
}
