package fleetsim

import (
	"math/rand/v2"
	"time"
)

// Few-prefixes parameters: fewSystems system prompts of fewSysTokens each
// (16,000 tokens together, 40% of an L4's KV cache, so every replica can
// hold all of them), questions and answers of 100–300 tokens.
const (
	fewSystems     = 8
	fewSysTokens   = 2000
	fewMinTokens   = 100
	fewSpanTokens  = 201
	fewMaxTokens   = 512
	fewRate        = 3.4 // requests/s on 4 L4s: see fewPrefixes
	fewDuration    = 240 * time.Second
	fewWarmUp      = 60 * time.Second
	fewReplicasHW  = "l4:4"
	fewSourceWords = "synthetic: 8 system prompts of 2,000 tokens that fit on every replica, 100–300-token questions and answers, Poisson at ~70% of the fleet's capacity"
)

// fewPrefixes is the warm-fleet regime: a handful of system prompts that
// every replica can cache at once, at about 70% load. Once each replica
// holds every prompt, affinity stops mattering (every replica is warm for
// every request) and the only thing left to route on is balance: a router
// has to do at least as well as a rotation there. fewRate is 70% of the
// rate at which round-robin's queues stop draining on four L4s (the
// capacity sweep in docs/simulator.md, "Workloads"); the first fewWarmUp
// of arrivals are the warm-up the results' steady figures leave out.
func fewPrefixes(o WorkloadOptions) *Workload {
	if o.RateScale == 0 {
		o.RateScale = 1
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 5))
	sys := make([]Segment, fewSystems)
	for i := range sys {
		sys[i] = seg(rng, fewSysTokens)
	}
	w := &Workload{Name: "few-prefixes", Hardware: fewReplicasHW, Source: fewSourceWords,
		WarmUp: time.Duration(float64(fewWarmUp) * o.TimeScale)}
	for _, at := range arrivals(rng, []Stage{{fewRate, fewDuration}}, o) {
		g := rng.IntN(fewSystems)
		q := seg(rng, fewMinTokens+rng.IntN(fewSpanTokens))
		r := NewRequest(0, at, DefaultModel, "", []Segment{sys[g], q}, fewMaxTokens, fewMinTokens+rng.IntN(fewSpanTokens))
		r.Session = g
		w.Requests = append(w.Requests, r)
	}
	return w
}
