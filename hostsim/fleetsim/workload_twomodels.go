package fleetsim

import (
	"math/rand/v2"
	"time"
)

// Two-models parameters: each model's pool, its chat traffic (system
// prompts shared by many requests, a question, an answer) and its rate.
const (
	twoModelsHW       = "4xh100/llama-3-70b:2,l40s:4"
	twoModelsDuration = 120 * time.Second
	twoModelsWarmUp   = 20 * time.Second
	twoModelsMaxOut   = 512
	twoModelsSource   = "synthetic: Llama-3.1-70B on two TP4 H100 replicas and Llama-3.1-8B on four L40S, chat traffic on shared system prompts, each pool at ~70% of its capacity"
)

// twoModelStream is one model's traffic in the two-models workload.
type twoModelStream struct {
	model, class       string
	rate               float64 // requests/s
	systems, sysTokens int
	qMean, qSD         float64
	outMean, outSD     float64
	pcg                uint64
}

// twoModelStreams are the two pools' traffic. Each rate is 70% of the
// rate at which round-robin's queues on that pool stop draining (the
// capacity sweep in docs/simulator.md, "Workloads").
var twoModelStreams = [2]twoModelStream{
	{model: Model70B, class: "llama-70b", rate: 8.0, systems: 16, sysTokens: 2000, qMean: 400, qSD: 100, outMean: 250, outSD: 80, pcg: 6},
	{model: DefaultModel, class: "llama-8b", rate: 10.5, systems: 32, sysTokens: 1000, qMean: 300, qSD: 80, outMean: 150, outSD: 50, pcg: 7},
}

// twoModels is a fleet that serves two models, as most fleets do: a 70B
// model on tensor-parallel H100 replicas and an 8B model on L40S, each
// request naming its model, so each request has only its pool to go to.
// Requests carry their model as their class, so the results give each
// pool's figures.
func twoModels(o WorkloadOptions) *Workload {
	if o.RateScale == 0 {
		o.RateScale = 1
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	w := &Workload{Name: "two-models", Hardware: twoModelsHW, Source: twoModelsSource,
		WarmUp: time.Duration(float64(twoModelsWarmUp) * o.TimeScale)}
	for _, s := range twoModelStreams {
		rng := rand.New(rand.NewPCG(uint64(o.Seed), s.pcg))
		sys := make([]Segment, s.systems)
		for i := range sys {
			sys[i] = seg(rng, s.sysTokens)
		}
		for _, at := range arrivals(rng, []Stage{{s.rate, twoModelsDuration}}, o) {
			g := rng.IntN(s.systems)
			q := seg(rng, normalInt(rng, s.qMean, s.qSD, 1, 4*int(s.qMean)))
			out := normalInt(rng, s.outMean, s.outSD, 1, twoModelsMaxOut)
			r := NewRequest(0, at, s.model, "", []Segment{sys[g], q}, twoModelsMaxOut, out)
			r.Session, r.Class = g, s.class
			w.Requests = append(w.Requests, r)
		}
	}
	return w
}
